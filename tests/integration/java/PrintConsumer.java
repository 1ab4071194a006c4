// The real RocketMQ 4.9.8 client, for tests/integration/test_grpc.py: a push consumer of GROUP reads
// COUNT messages of TOPIC from its first offset (or 30 s) and prints each on a line as a 4.x
// application sees it: "msg <msgId> <tags> <keys> <property p or -> <__SHARDINGKEY or -> <body>".
//   rmq java PrintConsumer NAMESRV TOPIC GROUP COUNT
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public class PrintConsumer {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1], group = args[2];
        int count = Integer.parseInt(args[3]);
        CountDownLatch all = new CountDownLatch(count);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener(new MessageListenerConcurrently() {
            public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs, ConsumeConcurrentlyContext ctx) {
                for (MessageExt m : msgs) {
                    String p = m.getUserProperty("p"), group = m.getProperty("__SHARDINGKEY");
                    synchronized (System.out) {
                        System.out.println("msg " + m.getMsgId() + " " + m.getTags() + " " + m.getKeys() + " "
                            + (p == null ? "-" : p) + " " + (group == null ? "-" : group) + " " + new String(m.getBody()));
                    }
                    all.countDown();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            }
        });
        consumer.start();
        all.await(30000, TimeUnit.MILLISECONDS);
        consumer.shutdown();
    }
}
