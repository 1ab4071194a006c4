// The real RocketMQ 4.9.8 client, for tests/integration/test_dispatch_safety.py (#49): one batch of
// COUNT messages to TOPIC, the last with putUserProperty("note", "two words") and no keys on any,
// then a push consumer from the first offset prints what it got ("received=N note=<value>").
//   rmq java BatchProperty NAMESRV TOPIC COUNT WAIT_MS
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class BatchProperty {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1];
        int count = Integer.parseInt(args[2]);
        long waitMs = Long.parseLong(args[3]);
        DefaultMQProducer producer = new DefaultMQProducer("batch-property-producer");
        producer.setNamesrvAddr(namesrv);
        producer.start();
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            Message m = new Message(topic, ("plain-" + i).getBytes("UTF-8"));
            if (i == count - 1) {
                m.putUserProperty("note", "two words");
            }
            batch.add(m);
        }
        SendResult r = producer.send(batch);
        System.out.println("batch=" + r.getSendStatus());
        for (int i = 0; i < 3; i++) {
            System.out.println("single=" + producer.send(new Message(topic, ("after-" + i).getBytes("UTF-8"))).getSendStatus());
        }
        producer.shutdown();
        CountDownLatch all = new CountDownLatch(count + 3);
        AtomicInteger got = new AtomicInteger();
        final String[] note = {"none"};
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("batch-property-consumer");
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener(new MessageListenerConcurrently() {
            public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs, ConsumeConcurrentlyContext ctx) {
                for (MessageExt m : msgs) {
                    if (m.getUserProperty("note") != null) {
                        note[0] = m.getUserProperty("note");
                    }
                    got.incrementAndGet();
                    all.countDown();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            }
        });
        consumer.start();
        all.await(waitMs, TimeUnit.MILLISECONDS);
        Thread.sleep(500);
        System.out.println("received=" + got.get() + " note=" + note[0]);
        consumer.shutdown();
    }
}
