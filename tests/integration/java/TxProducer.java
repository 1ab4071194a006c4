// The real RocketMQ 4.9.8 client's TransactionMQProducer, for tests/integration/test_javaclient.py:
// sends one half message with sendMessageInTransaction and prints, one "key=value" a line, what
// came back: the send status, or each exception of the cause chain with its response code, and
// how many times the local transaction callback ran.
//   rmq java TxProducer NAMESRV TOPIC
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class TxProducer {
    public static void main(String[] args) throws Exception {
        AtomicInteger executed = new AtomicInteger(), checked = new AtomicInteger();
        TransactionMQProducer producer = new TransactionMQProducer("tx-test-producer");
        producer.setNamesrvAddr(args[0]);
        producer.setSendMsgTimeout(5000);
        producer.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                executed.incrementAndGet();
                return LocalTransactionState.COMMIT_MESSAGE;
            }

            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                checked.incrementAndGet();
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        producer.start();
        try {
            TransactionSendResult r = producer.sendMessageInTransaction(
                new Message(args[1], "TagA", "half".getBytes("UTF-8")), null);
            System.out.println("status=" + r.getSendStatus() + " local=" + r.getLocalTransactionState());
        } catch (Exception e) {
            for (Throwable t = e; t != null; t = t.getCause()) {
                int code = t instanceof MQClientException ? ((MQClientException) t).getResponseCode()
                    : t instanceof MQBrokerException ? ((MQBrokerException) t).getResponseCode() : -1;
                String message = t instanceof MQBrokerException ? ((MQBrokerException) t).getErrorMessage()
                    : t.getMessage();
                System.out.println("exception=" + t.getClass().getSimpleName() + " code=" + code
                    + " message=" + String.valueOf(message).replace('\n', ' '));
            }
        }
        System.out.println("executed=" + executed.get() + " checked=" + checked.get());
        producer.shutdown();
    }
}
