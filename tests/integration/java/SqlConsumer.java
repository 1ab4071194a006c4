// The real RocketMQ 4.9.8 client, for tests/integration/test_sql92.py: a push consumer of GROUP
// subscribed to TOPIC with MessageSelector.bySql(EXPRESSION), from the first offset, prints each
// message's body ("body=...") until it has WANT of them or WAIT_MS passed, then "done"; a start
// the broker refuses prints "refused code=<response code> message=<its text>".
//   rmq java SqlConsumer NAMESRV TOPIC GROUP EXPRESSION WANT WAIT_MS
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public class SqlConsumer {
    public static void main(String[] args) throws Exception {
        int want = Integer.parseInt(args[4]);
        CountDownLatch got = new CountDownLatch(want);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(args[2]);
        consumer.setNamesrvAddr(args[0]);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(args[1], MessageSelector.bySql(args[3]));
        consumer.registerMessageListener(new MessageListenerConcurrently() {
            public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs, ConsumeConcurrentlyContext ctx) {
                for (MessageExt m : msgs) {
                    System.out.println("body=" + new String(m.getBody()));
                    got.countDown();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            }
        });
        try {
            consumer.start();
        } catch (MQClientException e) {
            Throwable t = e;
            while (t.getCause() != null && t.getCause() != t) {
                t = t.getCause();
            }
            int code = t instanceof MQClientException ? ((MQClientException) t).getResponseCode() : e.getResponseCode();
            System.out.println("refused code=" + code + " message=" + String.valueOf(t.getMessage()).replace('\n', ' '));
            System.exit(0);             // (the client's threads, started before the check, would keep the JVM)
        }
        got.await(Long.parseLong(args[5]), TimeUnit.MILLISECONDS);
        Thread.sleep(1000);             // a message that should not come would come by now
        System.out.println("done");
        consumer.shutdown();
    }
}
