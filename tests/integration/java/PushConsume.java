// What several test programs do with the real RocketMQ 4.9.8 client: a push consumer of GROUP on
// every tag of TOPIC, from its first offset, hands each message to EACH (one at a time) until N
// were taken or WAIT_MS passed, then 500 ms more, and shuts down (which commits its offsets).
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public final class PushConsume {
    private PushConsume() {}

    // -> how many messages EACH was given
    public static int run(String namesrv, String topic, String group, int n, long waitMs, Consumer<MessageExt> each)
            throws Exception {
        CountDownLatch all = new CountDownLatch(n);
        AtomicInteger taken = new AtomicInteger();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener(new MessageListenerConcurrently() {
            public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs, ConsumeConcurrentlyContext ctx) {
                for (MessageExt m : msgs) {
                    synchronized (PushConsume.class) {
                        each.accept(m);
                    }
                    taken.incrementAndGet();
                    all.countDown();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            }
        });
        consumer.start();
        all.await(waitMs, TimeUnit.MILLISECONDS);
        Thread.sleep(500);
        consumer.shutdown();
        return taken.get();
    }
}
