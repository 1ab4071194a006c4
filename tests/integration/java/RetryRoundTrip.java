// The real RocketMQ 4.9.8 client, for tests/integration/test_delay.py: a push consumer of group
// GROUP (maxReconsumeTimes MAX) answers RECONSUME_LATER to every delivery of one message sent to
// TOPIC; each delivery is printed ("delivery=<reconsumeTimes> after_ms=... topic=..."); once it has
// failed MAX + 1 times, a second consumer reads %DLQ%GROUP and prints what it finds there.
//   rmq java RetryRoundTrip NAMESRV TOPIC GROUP MAX WAIT_MS
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class RetryRoundTrip {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1], group = args[2];
        int max = Integer.parseInt(args[3]);
        long waitMs = Long.parseLong(args[4]);
        CountDownLatch failedAll = new CountDownLatch(max + 1), inDlq = new CountDownLatch(1);
        final long[] sentAt = {0};
        DefaultMQProducer producer = new DefaultMQProducer("retry-test-producer");
        producer.setNamesrvAddr(namesrv);
        producer.start();
        producer.send(new Message(topic, "init", "init".getBytes("UTF-8")));
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setMaxReconsumeTimes(max);
        consumer.subscribe(topic, "TagR");
        consumer.registerMessageListener(new MessageListenerConcurrently() {
            public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs, ConsumeConcurrentlyContext ctx) {
                for (MessageExt m : msgs) {
                    System.out.println("delivery=" + m.getReconsumeTimes() + " after_ms=" + (System.currentTimeMillis() - sentAt[0])
                        + " topic=" + m.getTopic() + " body=" + new String(m.getBody()));
                    failedAll.countDown();
                }
                return ConsumeConcurrentlyStatus.RECONSUME_LATER;
            }
        });
        consumer.start();
        Thread.sleep(3000);
        sentAt[0] = System.currentTimeMillis();
        producer.send(new Message(topic, "TagR", "retried".getBytes("UTF-8")));
        boolean failed = failedAll.await(waitMs, TimeUnit.MILLISECONDS);
        System.out.println("failed_all=" + failed);
        Thread.sleep(1000);
        DefaultMQPushConsumer dlq = new DefaultMQPushConsumer("dlq-reader");
        dlq.setNamesrvAddr(namesrv);
        dlq.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        dlq.subscribe("%DLQ%" + group, "*");
        dlq.registerMessageListener(new MessageListenerConcurrently() {
            public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs, ConsumeConcurrentlyContext ctx) {
                for (MessageExt m : msgs) {
                    System.out.println("dlq_body=" + new String(m.getBody()) + " dlq_reconsume=" + m.getReconsumeTimes()
                        + " dlq_retry_topic=" + m.getProperty("RETRY_TOPIC") + " dlq_topic=" + m.getTopic());
                    inDlq.countDown();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            }
        });
        dlq.start();
        System.out.println("in_dlq=" + inDlq.await(15000, TimeUnit.MILLISECONDS));
        dlq.shutdown();
        consumer.shutdown();
        producer.shutdown();
    }
}
