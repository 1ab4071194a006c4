// The real RocketMQ 4.9.8 client, for tests/integration/test_failover.py: a push consumer of GROUP
// subscribed to TOPIC from the first offset, printing each message's body ("body=...", flushed)
// for RUN_MS.  Its name server poll and heartbeats every 2 s (the client's defaults are 30 s), so
// the test sees it turn to a slave, and back, within seconds.
//   rmq java FailoverConsumer NAMESRV TOPIC GROUP RUN_MS
import java.util.List;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public class FailoverConsumer {
    public static void main(String[] args) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(args[2]);
        consumer.setNamesrvAddr(args[0]);
        consumer.setPollNameServerInterval(2000);
        consumer.setHeartbeatBrokerInterval(2000);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(args[1], "*");
        consumer.registerMessageListener(new MessageListenerConcurrently() {
            public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs, ConsumeConcurrentlyContext ctx) {
                synchronized (System.out) {
                    for (MessageExt m : msgs) {
                        System.out.println("body=" + new String(m.getBody()));
                    }
                    System.out.flush();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            }
        });
        consumer.start();
        Thread.sleep(Long.parseLong(args[3]));
        consumer.shutdown();
        System.out.println("done");
    }
}
