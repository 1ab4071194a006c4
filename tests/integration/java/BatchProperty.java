// The real RocketMQ 4.9.8 client, for tests/integration/test_dispatch_safety.py (#49): one batch of
// COUNT messages to TOPIC, the last with putUserProperty("note", "two words") and no keys on any,
// then a push consumer from the first offset prints what it got ("received=N note=<value>").
//   rmq java BatchProperty NAMESRV TOPIC COUNT WAIT_MS
import java.util.ArrayList;
import java.util.List;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

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
        final String[] note = {"none"};
        int got = PushConsume.run(namesrv, topic, "batch-property-consumer", count + 3, waitMs, m -> {
            if (m.getUserProperty("note") != null) {
                note[0] = m.getUserProperty("note");
            }
        });
        System.out.println("received=" + got + " note=" + note[0]);
    }
}
