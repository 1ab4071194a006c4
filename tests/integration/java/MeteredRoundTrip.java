// The real RocketMQ 4.9.8 client, for tests/integration/test_metrics.py: a push consumer of GROUP
// takes one message sent to TOPIC and commits it (the group has offsets on the topic), and stops;
// then COUNT messages are sent and left HOLD_MS (a scraper sees the group's lag go up), and a
// second consumer of GROUP takes them all and commits; prints "sent=<n>" and "consumed=<n>".
//   rmq java MeteredRoundTrip NAMESRV TOPIC GROUP COUNT HOLD_MS

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

public class MeteredRoundTrip {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1], group = args[2];
        int count = Integer.parseInt(args[3]);
        long holdMs = Long.parseLong(args[4]);
        DefaultMQProducer producer = new DefaultMQProducer("metered-producer");
        producer.setNamesrvAddr(namesrv);
        producer.start();
        producer.send(new Message(topic, "init", "init".getBytes("UTF-8")));
        consumeAll(namesrv, topic, group, 1);        // the group's first commit
        int sent = 0;
        for (int i = 0; i < count; i++) {
            if (producer.send(new Message(topic, "TagM", ("metered-" + i).getBytes("UTF-8"))).getSendStatus() == SendStatus.SEND_OK)
                sent++;
        }
        System.out.println("sent=" + sent);
        System.out.flush();
        Thread.sleep(holdMs);
        System.out.println("consumed=" + consumeAll(namesrv, topic, group, count));
        producer.shutdown();
    }

    // A push consumer of GROUP until it has taken N messages (or 30 s), then shut down (which
    // commits its offsets) -> how many it took.
    static int consumeAll(String namesrv, String topic, String group, int n) throws Exception {
        return PushConsume.run(namesrv, topic, group, n, 30000, m -> { });
    }
}
