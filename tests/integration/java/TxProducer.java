// The real RocketMQ 4.9.8 client's TransactionMQProducer, for tests/integration/test_javaclient.py:
// sends one half message with sendMessageInTransaction and prints, one "key=value" a line, what
// came back: the send status, or each exception of the cause chain with its response code, and
// how many times the local transaction callback ran. With DECISIONS (e.g. "commit,rollback"), one
// half message each, "tx-<i>" with key "tx-<i>", whose local transaction answers that decision
// ("unknown": UNKNOW, then COMMIT when checked back; "never": UNKNOW, and UNKNOW when checked),
// and a line each: "sent=<i> status=<send status> local=<state> msgId=<id>"; then it waits (up to
// WAIT_S seconds, default 0) until CHECKS check-backs came.
//   rmq java TxProducer NAMESRV TOPIC [DECISIONS [CHECKS WAIT_S]]
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
                return arg == null ? LocalTransactionState.COMMIT_MESSAGE : (LocalTransactionState) arg;
            }

            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                checked.incrementAndGet();
                String keys = msg.getKeys();
                if (args.length > 2 && keys != null && keys.startsWith("tx-")
                        && args[2].split(",")[Integer.parseInt(keys.substring(3))].equals("never")) {
                    return LocalTransactionState.UNKNOW;
                }
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        producer.start();
        if (args.length > 2) {
            String[] decisions = args[2].split(",");
            for (int i = 0; i < decisions.length; i++) {
                LocalTransactionState state = decisions[i].equals("commit") ? LocalTransactionState.COMMIT_MESSAGE
                    : decisions[i].equals("rollback") ? LocalTransactionState.ROLLBACK_MESSAGE : LocalTransactionState.UNKNOW;
                Message msg = new Message(args[1], "TagA", "tx-" + i, ("tx-" + i).getBytes("UTF-8"));
                TransactionSendResult r = producer.sendMessageInTransaction(msg, state);
                System.out.println("sent=" + i + " status=" + r.getSendStatus() + " local=" + r.getLocalTransactionState()
                    + " msgId=" + r.getMsgId());
            }
            int checks = args.length > 3 ? Integer.parseInt(args[3]) : 0;
            long until = System.currentTimeMillis() + 1000L * (args.length > 4 ? Integer.parseInt(args[4]) : 0);
            while (checked.get() < checks && System.currentTimeMillis() < until) {
                Thread.sleep(100);
            }
            Thread.sleep(500);        // END_TRANSACTION is oneway: give it time to leave before shutdown
            System.out.println("executed=" + executed.get() + " checked=" + checked.get());
            producer.shutdown();
            return;
        }
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
