// The real RocketMQ 4.9.8 client, for tests/integration/test_delay.py: a push consumer subscribes
// to TOPIC, a producer sends one message with delay level LEVEL, and it prints, one "key=value" a
// line, the send's result and, when the consumer gets the message, how long after the send that
// was and the properties it came with; at most WAIT_MS.  LEVEL "ms:N" sends a 5.x timer instead
// (the TIMER_DELAY_MS property, N ms, as a 5.x producer's setDelayTimeMs sets it).
//   rmq java DelayRoundTrip NAMESRV TOPIC LEVEL WAIT_MS
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class DelayRoundTrip {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1];
        String level = args[2];
        long waitMs = Long.parseLong(args[3]);
        CountDownLatch got = new CountDownLatch(1);
        final long[] sentAt = {0};
        DefaultMQProducer producer = new DefaultMQProducer("delay-test-producer");
        producer.setNamesrvAddr(namesrv);
        producer.start();
        producer.send(new Message(topic, "init", "init".getBytes("UTF-8")));    // the topic exists
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("delay-test-consumer");
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "TagD");
        consumer.registerMessageListener(new MessageListenerConcurrently() {
            public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs,
                                                            org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext ctx) {
                for (MessageExt m : msgs) {
                    long now = System.currentTimeMillis();
                    System.out.println("received_after_ms=" + (now - sentAt[0]) + " queue=" + m.getQueueId()
                        + " delay=" + m.getProperty("DELAY") + " real_topic=" + m.getProperty("REAL_TOPIC")
                        + " timer_out=" + m.getProperty("TIMER_OUT_MS")
                        + " reconsume=" + m.getReconsumeTimes() + " body=" + new String(m.getBody()));
                    got.countDown();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            }
        });
        consumer.start();
        Thread.sleep(3000);                          // the consumer has its queues
        Message msg = new Message(topic, "TagD", "delayed".getBytes("UTF-8"));
        if (level.startsWith("ms:")) {
            msg.putUserProperty("TIMER_DELAY_MS", level.substring(3));
        } else {
            msg.setDelayTimeLevel(Integer.parseInt(level));
        }
        sentAt[0] = System.currentTimeMillis();
        SendResult r = producer.send(msg);
        System.out.println("status=" + r.getSendStatus() + " queue=" + r.getMessageQueue().getQueueId());
        boolean ok = got.await(waitMs, TimeUnit.MILLISECONDS);
        System.out.println("received=" + ok);
        consumer.shutdown();
        producer.shutdown();
    }
}
