// The real RocketMQ 4.9.8 client, for tests/integration/test_cluster.py: a producer that sends COUNT
// messages to TOPIC (body and key PREFIX-i), one at a time, as the client spreads them over the
// topic's queues on every broker group, and prints "ok <brokerName> <key>" for each SEND_OK, else
// "fail <key> <status or exception>".  Its name server poll every 2 s (the default is 30 s).
//   rmq java ClusterProducer NAMESRV TOPIC PREFIX COUNT
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

public class ClusterProducer {
    public static void main(String[] args) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("cluster-pg-" + args[2]);
        producer.setNamesrvAddr(args[0]);
        producer.setPollNameServerInterval(2000);
        producer.setRetryTimesWhenSendFailed(2);
        producer.start();
        int count = Integer.parseInt(args[3]);
        for (int i = 0; i < count; i++) {
            String key = args[2] + "-" + i;
            Message m = new Message(args[1], "", key, key.getBytes());
            try {
                SendResult r = producer.send(m);
                if (r.getSendStatus() == SendStatus.SEND_OK) {
                    System.out.println("ok " + r.getMessageQueue().getBrokerName() + " " + key);
                } else {
                    System.out.println("fail " + key + " " + r.getSendStatus());
                }
            } catch (Exception e) {
                System.out.println("fail " + key + " " + e.getClass().getSimpleName());
            }
        }
        System.out.flush();
        producer.shutdown();
    }
}
