import java.lang.management.ManagementFactory;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;

/**
 * bench.client's Java side: this JVM's CPU per message sent (async sends, WINDOW in flight), then per
 * message consumed (a push consumer with the client's defaults), each over N messages after a
 * warm-up of N / 2 (the JIT's).
 *
 *   java ClientCost NAMESRV TOPIC N BODY_BYTES WINDOW
 * prints: send_cpu_us=... send_s=... consume_cpu_us=... consume_s=...
 */
public class ClientCost {
    static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }

    static void send(DefaultMQProducer producer, String topic, byte[] body, int n, int window) throws Exception {
        Semaphore slots = new Semaphore(window);
        AtomicReference<Throwable> failed = new AtomicReference<>();
        for (int i = 0; i < n; i++) {
            slots.acquire();
            producer.send(new Message(topic, body), new SendCallback() {
                public void onSuccess(SendResult r) { slots.release(); }
                public void onException(Throwable e) { failed.set(e); slots.release(); }
            });
        }
        slots.acquire(window);
        if (failed.get() != null) throw new RuntimeException("a send failed", failed.get());
    }

    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1];
        int n = Integer.parseInt(args[2]), size = Integer.parseInt(args[3]), window = Integer.parseInt(args[4]);
        int warm = n / 2, total = warm + n;
        byte[] body = new byte[size];
        DefaultMQProducer producer = new DefaultMQProducer("cost-java-producer");
        producer.setNamesrvAddr(namesrv);
        producer.start();
        send(producer, topic, body, warm, window);
        long c0 = cpuNanos(), t0 = System.nanoTime();
        send(producer, topic, body, n, window);
        long c1 = cpuNanos(), t1 = System.nanoTime();
        producer.shutdown();

        AtomicInteger got = new AtomicInteger();
        AtomicLong cpuAtWarm = new AtomicLong(), timeAtWarm = new AtomicLong();
        CountDownLatch done = new CountDownLatch(1);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("cost-java-consumer");
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            int now = got.addAndGet(msgs.size());
            if (now >= warm && now - msgs.size() < warm) {
                cpuAtWarm.set(cpuNanos());
                timeAtWarm.set(System.nanoTime());
            }
            if (now >= total) done.countDown();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        done.await();
        long c3 = cpuNanos(), t3 = System.nanoTime();
        consumer.shutdown();
        System.out.printf("send_cpu_us=%.3f send_s=%.3f consume_cpu_us=%.3f consume_s=%.3f%n",
                          (c1 - c0) / 1000.0 / n, (t1 - t0) / 1e9, (c3 - cpuAtWarm.get()) / 1000.0 / n,
                          (t3 - timeAtWarm.get()) / 1e9);
    }
}
