// Kafka 4.x's client-facing admin calls through the Java AdminClient (kafka-clients 3.9.1),
// run by tests/broker/test_kafka4_apis_clients.py.
// One AdminClient run: each step prints one JSON line. Results per partition are the
// exception's simple class name, or "ok".
import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.*;

public class Kafka4Admin {
    static String outcome(KafkaFuture<?> f) throws InterruptedException {
        try { f.get(); return "ok"; }
        catch (ExecutionException e) { return e.getCause().getClass().getSimpleName(); }
    }
    static String q(String s) { return "\"" + s + "\""; }
    static void print(String step, Map<String, String> values) {
        StringBuilder b = new StringBuilder("{\"step\":" + q(step));
        for (Map.Entry<String, String> e : new TreeMap<>(values).entrySet())
            b.append(",").append(q(e.getKey())).append(":").append(q(e.getValue()));
        System.out.println(b.append("}"));
    }
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("default.api.timeout.ms", "20000");
        props.put("request.timeout.ms", "15000");
        try (Admin admin = Admin.create(props)) {
            Map<String, String> out = new HashMap<>();
            Map<String, KafkaFuture<TopicDescription>> described = admin.describeTopics(
                List.of("jt", "other", "missing"),
                new DescribeTopicsOptions().partitionSizeLimitPerResponse(2)).topicNameValues();
            for (Map.Entry<String, KafkaFuture<TopicDescription>> e : described.entrySet()) {
                try {
                    TopicDescription d = e.getValue().get();
                    StringBuilder parts = new StringBuilder();
                    for (TopicPartitionInfo p : d.partitions())
                        parts.append(p.partition()).append(":").append(p.leader().id())
                             .append(p.replicas().size()).append(p.isr().size()).append(" ");
                    out.put(e.getKey(), parts.toString().trim());
                } catch (ExecutionException x) {
                    out.put(e.getKey(), x.getCause().getClass().getSimpleName());
                }
            }
            print("describe-topics", out);

            out = new HashMap<>();
            Set<TopicPartition> named = Set.of(new TopicPartition("jt", 0),
                new TopicPartition("jt", 9), new TopicPartition("nope", 0));
            for (ElectionType type : ElectionType.values()) {
                Map<TopicPartition, Optional<Throwable>> r =
                    admin.electLeaders(type, named).partitions().get();
                for (Map.Entry<TopicPartition, Optional<Throwable>> e : r.entrySet())
                    out.put(type + " " + e.getKey(),
                            e.getValue().map(t -> t.getClass().getSimpleName()).orElse("ok"));
            }
            out.put("all", String.valueOf(
                admin.electLeaders(ElectionType.PREFERRED, null).partitions().get().size()));
            print("elect-leaders", out);

            out = new HashMap<>();
            Map<TopicPartition, Optional<NewPartitionReassignment>> targets = new HashMap<>();
            targets.put(new TopicPartition("jt", 0),
                        Optional.of(new NewPartitionReassignment(List.of(0))));
            targets.put(new TopicPartition("jt", 1),
                        Optional.of(new NewPartitionReassignment(List.of(5))));
            targets.put(new TopicPartition("jt", 2), Optional.empty());
            targets.put(new TopicPartition("nope", 0),
                        Optional.of(new NewPartitionReassignment(List.of(0))));
            for (Map.Entry<TopicPartition, KafkaFuture<Void>> e :
                     admin.alterPartitionReassignments(targets).values().entrySet())
                out.put(e.getKey().toString(), outcome(e.getValue()));
            out.put("listed-all", String.valueOf(
                admin.listPartitionReassignments().reassignments().get().size()));
            out.put("listed-jt", String.valueOf(admin.listPartitionReassignments(
                Set.of(new TopicPartition("jt", 0))).reassignments().get().size()));
            print("reassignments", out);

            out = new HashMap<>();
            String logDir = admin.describeLogDirs(List.of(0)).allDescriptions().get()
                .get(0).keySet().iterator().next();
            Map<TopicPartitionReplica, String> moves = new HashMap<>();
            moves.put(new TopicPartitionReplica("jt", 0, 0), logDir);
            moves.put(new TopicPartitionReplica("jt", 1, 0), "/nowhere");
            moves.put(new TopicPartitionReplica("jt", 7, 0), logDir);
            for (Map.Entry<TopicPartitionReplica, KafkaFuture<Void>> e :
                     admin.alterReplicaLogDirs(moves).values().entrySet())
                out.put(e.getKey().topic() + "-" + e.getKey().partition(),
                        outcome(e.getValue()));
            print("alter-replica-log-dirs", out);

            out = new HashMap<>();
            out.put("create-token", outcome(admin.createDelegationToken().delegationToken()));
            out.put("describe-tokens",
                    outcome(admin.describeDelegationToken().delegationTokens()));
            out.put("client-metrics-resources", String.valueOf(
                admin.listClientMetricsResources().all().get().size()));
            print("tokens-and-telemetry", out);
        }
    }
}
