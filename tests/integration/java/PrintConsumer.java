// The real RocketMQ 4.9.8 client, for tests/integration/test_grpc.py: a push consumer of GROUP reads
// COUNT messages of TOPIC from its first offset (or 30 s) and prints each on a line as a 4.x
// application sees it: "msg <msgId> <tags> <keys> <property p or -> <__SHARDINGKEY or -> <body>".
//   rmq java PrintConsumer NAMESRV TOPIC GROUP COUNT
public class PrintConsumer {
    public static void main(String[] args) throws Exception {
        PushConsume.run(args[0], args[1], args[2], Integer.parseInt(args[3]), 30000, m -> {
            String p = m.getUserProperty("p"), group = m.getProperty("__SHARDINGKEY");
            System.out.println("msg " + m.getMsgId() + " " + m.getTags() + " " + m.getKeys() + " "
                + (p == null ? "-" : p) + " " + (group == null ? "-" : group) + " " + new String(m.getBody()));
        });
    }
}
