/*
 * GoldenClient: drives Java kafka-clients 3.9.1 against tests/golden/capture.py so the capture
 * server can record the request frames the real Java client sends.
 *
 * Usage: java GoldenClient <bootstrap> <label> <codec,codec,...>
 *
 * For every codec and every kind (plain: acks=1 without idempotence; idem: enable.idempotence;
 * txn: transactional.id, begin / send / sendOffsetsToTransaction / commit) it writes RECORDS
 * records to partition 0 of topic "golden-<codec>-<kind>": key "k<i>", value
 * "<label>-<codec>-<kind>-<i>" padded with '.' to 100 bytes, header ("i", "<i>"). Then a
 * read_committed group consumer reads them all back and commits, and an AdminClient creates,
 * describes and deletes a topic. capture.py holds the same naming scheme (record_value ...).
 * Prints one line per step; exits 1 on any failure.
 */

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.AppInfoParser;

public final class GoldenClient {
    static final int RECORDS = 5;
    static final int VALUE_SIZE = 100;
    static final String[] KINDS = {"plain", "idem", "txn"};

    static String topic(String codec, String kind) {
        return "golden-" + codec + "-" + kind;
    }

    static byte[] value(String label, String codec, String kind, int i) {
        StringBuilder sb = new StringBuilder(label + "-" + codec + "-" + kind + "-" + i);
        while (sb.length() < VALUE_SIZE) {
            sb.append('.');
        }
        return sb.toString().getBytes(StandardCharsets.UTF_8);
    }

    static void produce(String bootstrap, String label, String codec, String kind) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "golden-java-" + codec + "-" + kind);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "100");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        if (kind.equals("plain")) {
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
            p.put(ProducerConfig.ACKS_CONFIG, "1");
        } else {
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
            p.put(ProducerConfig.ACKS_CONFIG, "all");
        }
        boolean txn = kind.equals("txn");
        if (txn) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "golden-java-" + codec);
        }
        String topic = topic(codec, kind);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            if (txn) {
                producer.initTransactions();
                producer.beginTransaction();
            }
            for (int i = 0; i < RECORDS; i++) {
                ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, 0,
                        ("k" + i).getBytes(StandardCharsets.UTF_8), value(label, codec, kind, i));
                r.headers().add("i", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
                producer.send(r);
            }
            if (txn) {
                producer.sendOffsetsToTransaction(
                        Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(RECORDS)),
                        new ConsumerGroupMetadata("golden-txn-group"));
                producer.commitTransaction();
            } else {
                producer.flush();
            }
        }
        System.out.println("produced " + topic);
    }

    static void consume(String bootstrap, List<String> topics) throws InterruptedException {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, "golden-group");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "100");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        int want = topics.size() * RECORDS;
        int got = 0;
        long deadline = System.currentTimeMillis() + 60_000;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(topics);
            while (got < want) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("consumed " + got + " of " + want + " records");
                }
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                got += records.count();
            }
            Thread.sleep(500); // heartbeat.interval.ms is 100: let the heartbeat thread send some
            consumer.commitSync();
        }
        System.out.println("consumed " + got);
    }

    static void admin(String bootstrap) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        String topic = "golden-admin";
        try (Admin admin = Admin.create(p)) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
            admin.describeTopics(List.of(topic)).allTopicNames().get();
            admin.describeConfigs(List.of(new ConfigResource(ConfigResource.Type.TOPIC, topic)))
                    .all().get();
            admin.describeCluster().nodes().get();
            admin.deleteTopics(List.of(topic)).all().get();
        }
        System.out.println("admin done");
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: GoldenClient <bootstrap> <label> <codec,codec,...>");
            System.exit(2);
        }
        String bootstrap = args[0];
        String label = args[1];
        System.out.println("kafka-clients " + AppInfoParser.getVersion());
        List<String> topics = new ArrayList<>();
        for (String codec : args[2].split(",")) {
            for (String kind : KINDS) {
                produce(bootstrap, label, codec, kind);
                topics.add(topic(codec, kind));
            }
        }
        Collections.sort(topics);
        consume(bootstrap, topics);
        admin(bootstrap);
    }
}
