// Members of one consumer group using the KIP-848 protocol (group.protocol=consumer) in Java
// kafka-clients 3.9.1, driven line by line from stdin by
// tests/integration/test_consumer_group_protocol.py. The consumers live in one thread and are
// polled in turn; each record is committed (commitSync) before the next poll. Every command
// answers with one JSON line on stdout:
//
//   add TOPIC          a member subscribing to TOPIC        -> {"members": n}
//   add-pattern REGEX  a member subscribing to a Pattern    -> {"members": n}
//   remove             the oldest member closes (leaves)    -> {"members": n}
//   settle P           poll until the members own P partitions, balanced within one
//                                                           -> {"sizes": [..]}
//   consume N          poll until N records in all          -> {"consumed": N}
//   assigned           every member's partitions as topic-p -> {"assigned": [..]}
//   values             the values consumed, in order        -> {"values": [..]}
//   quit               close every member                   -> {"closed": true}
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Pattern;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class Kip848Members {
    static final long TIMEOUT_MS = 60_000;
    static final List<KafkaConsumer<byte[], byte[]>> members = new ArrayList<>();
    static final List<String> values = new ArrayList<>();
    static String bootstrap;
    static String group;

    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static KafkaConsumer<byte[], byte[]> member() {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, "500");  // a pattern sees new topics soon
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    static void pollAll() {
        for (KafkaConsumer<byte[], byte[]> consumer : members) {
            ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(50));
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            for (ConsumerRecord<byte[], byte[]> r : records) {
                values.add(new String(r.value(), StandardCharsets.UTF_8));
                offsets.put(new TopicPartition(r.topic(), r.partition()),
                    new OffsetAndMetadata(r.offset() + 1));
            }
            if (!offsets.isEmpty()) consumer.commitSync(offsets);
        }
    }

    static String settle(int partitions) {
        long deadline = System.currentTimeMillis() + TIMEOUT_MS;
        while (System.currentTimeMillis() < deadline) {
            pollAll();
            Set<TopicPartition> union = new HashSet<>();
            List<Integer> sizes = new ArrayList<>();
            for (KafkaConsumer<byte[], byte[]> c : members) {
                union.addAll(c.assignment());
                sizes.add(c.assignment().size());
            }
            sizes.sort(null);
            int total = sizes.stream().mapToInt(Integer::intValue).sum();
            if (union.size() == partitions && total == partitions
                    && sizes.get(sizes.size() - 1) - sizes.get(0) <= 1) {
                return "{\"sizes\": " + sizes + "}";
            }
        }
        throw new IllegalStateException("the group did not settle on " + partitions + " partitions");
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        group = args[1];
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            String[] cmd = line.trim().split(" ", 2);
            String out;
            switch (cmd[0]) {
                case "add" -> {
                    KafkaConsumer<byte[], byte[]> c = member();
                    c.subscribe(List.of(cmd[1]));
                    members.add(c);
                    out = "{\"members\": " + members.size() + "}";
                }
                case "add-pattern" -> {
                    KafkaConsumer<byte[], byte[]> c = member();
                    c.subscribe(Pattern.compile(cmd[1]));
                    members.add(c);
                    out = "{\"members\": " + members.size() + "}";
                }
                case "remove" -> {
                    members.remove(0).close();
                    out = "{\"members\": " + members.size() + "}";
                }
                case "settle" -> out = settle(Integer.parseInt(cmd[1]));
                case "consume" -> {
                    int n = Integer.parseInt(cmd[1]);
                    long deadline = System.currentTimeMillis() + TIMEOUT_MS;
                    while (values.size() < n && System.currentTimeMillis() < deadline) pollAll();
                    out = "{\"consumed\": " + values.size() + "}";
                }
                case "assigned" -> {
                    Set<String> assigned = new TreeSet<>();
                    for (KafkaConsumer<byte[], byte[]> c : members)
                        for (TopicPartition tp : c.assignment()) assigned.add(quote(tp.toString()));
                    out = "{\"assigned\": [" + String.join(", ", assigned) + "]}";
                }
                case "values" -> {
                    List<String> quoted = new ArrayList<>();
                    for (String v : values) quoted.add(quote(v));
                    out = "{\"values\": [" + String.join(", ", quoted) + "]}";
                }
                case "quit" -> {
                    for (KafkaConsumer<byte[], byte[]> c : members) c.close();
                    members.clear();
                    System.out.println("{\"closed\": true}");
                    return;
                }
                default -> throw new IllegalArgumentException("unknown command " + line);
            }
            System.out.println(out);
            System.out.flush();
        }
    }
}
