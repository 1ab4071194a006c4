// The real RocketMQ 4.9.8 client, for tests/integration/test_reply.py: a responder (a push consumer
// of TOPIC, a client instance of its own) answers each request with "re:<body>" through
// MessageUtil.createReplyMessage; a requester (DefaultMQProducer.request) sends N requests, one
// at a time, and prints each reply ("reply=<body> ms=<round trip>"), or "timeout=<i>".
//   rmq java RequestReply NAMESRV TOPIC N
import java.util.List;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class RequestReply {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1];
        int n = Integer.parseInt(args[2]);
        DefaultMQProducer replier = new DefaultMQProducer("reply-test-responder");
        replier.setNamesrvAddr(namesrv);
        replier.setInstanceName("responder");
        replier.start();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("reply-test-consumer");
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("responder");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener(new MessageListenerConcurrently() {
            public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs, ConsumeConcurrentlyContext ctx) {
                for (MessageExt m : msgs) {
                    try {
                        Message reply = MessageUtil.createReplyMessage(m, ("re:" + new String(m.getBody(), "UTF-8")).getBytes("UTF-8"));
                        replier.send(reply);
                    } catch (Exception e) {
                        System.out.println("reply_failed=" + e);
                    }
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            }
        });
        consumer.start();
        DefaultMQProducer requester = new DefaultMQProducer("reply-test-requester");
        requester.setNamesrvAddr(namesrv);
        requester.setInstanceName("requester");
        requester.start();
        Thread.sleep(3000);            // the responder's rebalance takes the queues
        for (int i = 0; i < n; i++) {
            long t0 = System.nanoTime();
            try {
                Message reply = requester.request(new Message(topic, ("q" + i).getBytes("UTF-8")), 3000);
                System.out.println("reply=" + new String(reply.getBody(), "UTF-8") + " ms=" + (System.nanoTime() - t0) / 1000000.0);
            } catch (Exception e) {
                System.out.println("timeout=" + i + " " + e);
            }
        }
        requester.shutdown();
        consumer.shutdown();
        replier.shutdown();
        System.exit(0);
    }
}
