/*
 * SemelClient: the real Java Kafka client (kafka-clients 3.9.1) driven from the test suite.
 *
 * Usage: java SemelClient <command> [options]; `--help` lists the commands.
 * Output: one JSON object per line on stdout, each with a "type" field. On failure the last
 * line on stderr is `SEMEL_CLIENT_ERROR {"class": ..., "message": ...}` (the exception that
 * ended the run, unwrapped from ExecutionException; plus "root_class"/"root_message" of its
 * innermost cause when it has one) and the exit status is 1; a usage error exits with 2. tests/javaclient.py compiles and runs this file.
 *
 * Deterministic data: record i (counting from --start) has value "<value-prefix>-<i>" padded
 * with '.' to --value-size bytes, and key "<key-prefix>-<i>" (no key without --key-prefix).
 * checksum = sum over records of CRC32(key bytes, 0x00, value bytes): order-independent, so a
 * produce summary (over acknowledged records) and a consume summary of the same records agree.
 *
 * produce prints {"type":"produce_summary", count, sent, acked, errors (= sent - acked),
 * checksum, partitions: {"<p>": {count, first_offset, last_offset}}}, preceded with --dump-acks
 * by one {"type":"ack", index, partition, offset} per acknowledged record. consume prints one
 * {"type":"record", topic, partition, offset, timestamp, timestamp_type, key, value[, headers]}
 * per record (unless --summary-only), then {"type":"consume_summary", count, checksum,
 * partitions}. Admin subcommands print one object each (see the methods below).
 *
 * Adding a command: write `static void name(Args a) throws Exception`, register it in
 * COMMANDS (or ADMIN_COMMANDS for `admin <sub>`) with its usage and options. `copier` is
 * tests/chaos's transactional copier and prints tests/chaos/history.py events instead.
 * txn-acl-probe runs transactional steps (--steps init,begin,send,offsets,commit,...) and prints
 * one {"type":"step", step, result: "ok"|"error", class, root_class, message} per step, going on
 * after a failure; a "pause" step prints {"type":"paused"} and waits for a line on stdin (the
 * test changes ACLs meanwhile). keyed-steps keeps an idempotent and a transactional producer open
 * and runs one stdin line at a time (send, begin/txn-send/commit/abort, read), answering each with
 * one JSON line: the test acts on the broker between steps while the producer ids go on.
 * Planned: admin list-transactions, describe-transactions, describe-producers, abort-transaction.
 * admin create-acls / describe-acls / delete-acls take an ACL (or filter) as seven words:
 * TYPE NAME PATTERN PRINCIPAL HOST OPERATION PERMISSION.
 */

import java.io.BufferedOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicReference;
import java.util.zip.CRC32;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class SemelClient {

    // ------------------------------------------------------------------ command tables

    @FunctionalInterface
    interface Command {
        void run(Args args) throws Exception;
    }

    record Spec(String name, String usage, Set<String> options, Command command) {}

    static final Set<String> COMMON = Set.of("bootstrap", "timeout-ms", "prop", "client-id", "help");
    /** Options that take no value (`--name=false` turns one off). */
    static final Set<String> FLAGS = Set.of("help", "dump", "dump-acks", "from-beginning", "until-end",
        "allow-fewer", "summary-only", "no-commit", "internal");
    static final Map<String, Spec> COMMANDS = new LinkedHashMap<>();
    static final Map<String, Spec> ADMIN_COMMANDS = new LinkedHashMap<>();

    static void register(Map<String, Spec> table, String name, String usage, String options, Command c) {
        Set<String> allowed = new HashSet<>(COMMON);
        if (!options.isEmpty()) allowed.addAll(Arrays.asList(options.split(" ")));
        table.put(name, new Spec(name, usage, allowed, c));
    }

    static {
        register(COMMANDS, "produce",
            "produce --bootstrap B --topic T --count N [--compression none|gzip|snappy|lz4|zstd]"
                + " [--acks 0|1|all] [--idempotent true|false] [--key-prefix K] [--value-prefix V]"
                + " [--value-size N] [--start I] [--partition P] [--linger-ms MS] [--dump-acks]"
                + " [--interval-ms MS]  (sleep between sends: a producer that lives a while)",
            "topic count compression acks idempotent key-prefix value-prefix value-size start"
                + " partition linger-ms dump-acks interval-ms",
            SemelClient::produce);
        register(COMMANDS, "txn-produce",
            "txn-produce --bootstrap B --topic T --count N --transactional-id ID [--per-txn N]"
                + " [--abort-every N] [--key-prefix K] [--value-prefix V] [--start I] [--partition P]"
                + " [--linger-ms MS]  (begin/send/commit per --per-txn records; every Nth aborted)",
            "topic count transactional-id per-txn abort-every key-prefix value-prefix start partition"
                + " linger-ms",
            SemelClient::txnProduce);
        register(COMMANDS, "txn-fence",
            "txn-fence --bootstrap B --topic T --transactional-id ID  (a second producer with the"
                + " same id fences the first mid-transaction; reports what the first then gets)",
            "topic transactional-id", SemelClient::txnFence);
        register(COMMANDS, "txn-acl-probe",
            "txn-acl-probe --bootstrap B --topic T --transactional-id ID [--group G]"
                + " [--steps init,begin,send,offsets,commit|abort,pause,...]  (one step line each;"
                + " errors reported, not thrown)",
            "topic transactional-id group steps", SemelClient::txnAclProbe);
        register(COMMANDS, "keyed-steps",
            "keyed-steps --bootstrap B --topic T [--partition P] [--transactional-id ID]"
                + "  (steps on stdin, one JSON line answers each: send K V | begin | txn-send K V"
                + " | commit | abort | read read_committed|read_uncommitted; V '-' = tombstone)",
            "topic partition transactional-id", SemelClient::keyedSteps);
        register(COMMANDS, "consume",
            "consume --bootstrap B --topic T [--count N | --until-end] [--group G] [--from-beginning]"
                + " [--isolation read_committed|read_uncommitted] [--partition P] [--offset O]"
                + " [--allow-fewer] [--summary-only] [--no-commit]",
            "topic count until-end group from-beginning isolation partition offset allow-fewer"
                + " summary-only no-commit",
            SemelClient::consume);
        register(COMMANDS, "records",
            "records --count N [--start I] [--key-prefix K] [--value-prefix V] [--value-size N] [--dump]"
                + "  (offline: the records produce would send, and their checksum)",
            "count start key-prefix value-prefix value-size dump", SemelClient::records);
        register(COMMANDS, "admin", "admin --bootstrap B <subcommand> ... (see below)",
            "partitions rf config delete broker internal isolation start-offset", SemelClient::admin);
        register(COMMANDS, "copier",
            "copier --bootstrap B --input IN --output OUT --group G --transactional-id T --process P"
                + " [--session N] [--seed S] [--txn-size N] [--abort-ratio R] [--stop-file PATH]"
                + " [--until-end] [--out-prefix P]  (Kafka's TransactionalMessageCopier shape; prints"
                + " history events, see copier())",
            "input output group transactional-id process session seed txn-size abort-ratio stop-file"
                + " until-end out-prefix",
            SemelClient::copier);

        register(ADMIN_COMMANDS, "create-topic",
            "create-topic T [--partitions P] [--rf R] [--config k=v]...", "", SemelClient::createTopic);
        register(ADMIN_COMMANDS, "delete-topic", "delete-topic T", "", SemelClient::deleteTopic);
        register(ADMIN_COMMANDS, "list-topics", "list-topics [--internal]", "", SemelClient::listTopics);
        register(ADMIN_COMMANDS, "describe-topic", "describe-topic T", "", SemelClient::describeTopic);
        register(ADMIN_COMMANDS, "describe-configs", "describe-configs T | describe-configs --broker ID",
            "", SemelClient::describeConfigs);
        register(ADMIN_COMMANDS, "alter-config",
            "alter-config T k=v... [--delete k]... (or --broker ID instead of T)", "",
            SemelClient::alterConfig);
        register(ADMIN_COMMANDS, "describe-cluster", "describe-cluster", "", SemelClient::describeCluster);
        register(ADMIN_COMMANDS, "create-partitions", "create-partitions T TOTAL", "",
            SemelClient::createPartitions);
        register(ADMIN_COMMANDS, "delete-records", "delete-records T PARTITION BEFORE_OFFSET", "",
            SemelClient::deleteRecords);
        register(ADMIN_COMMANDS, "list-offsets",
            "list-offsets T PARTITION earliest|latest|max-timestamp|<timestamp-ms>"
                + " [--isolation read_committed|read_uncommitted]", "", SemelClient::listOffsets);
        register(ADMIN_COMMANDS, "list-transactions", "list-transactions  (one line per transaction)",
            "", SemelClient::listTransactions);
        register(ADMIN_COMMANDS, "describe-transactions", "describe-transactions ID...", "",
            SemelClient::describeTransactions);
        register(ADMIN_COMMANDS, "describe-producers", "describe-producers T PARTITION", "",
            SemelClient::describeProducers);
        register(ADMIN_COMMANDS, "abort-transaction",
            "abort-transaction T PARTITION --start-offset O  (as kafka-transactions.sh abort: the"
                + " producer whose open transaction starts at O, found with describeProducers)",
            "", SemelClient::abortTransaction);
        register(ADMIN_COMMANDS, "fence-producers",
            "fence-producers ID...  (Admin.fenceProducers, which Kafka 4.1's"
                + " forceTerminateTransaction calls: aborts each id's open transaction)",
            "", SemelClient::fenceProducers);
        String aclArgs = "TYPE NAME PATTERN PRINCIPAL HOST OPERATION PERMISSION";
        register(ADMIN_COMMANDS, "create-acls", "create-acls " + aclArgs + " [" + aclArgs + "]..."
            + "  (Kafka's enum names, e.g. TOPIC orders LITERAL User:alice * READ ALLOW)", "",
            SemelClient::createAcls);
        register(ADMIN_COMMANDS, "describe-acls", "describe-acls " + aclArgs
            + "  (a filter: ANY/MATCH allowed, '-' = any name, principal or host)", "",
            SemelClient::describeAcls);
        register(ADMIN_COMMANDS, "delete-acls", "delete-acls " + aclArgs + " [" + aclArgs + "]..."
            + "  (filters, as describe-acls)", "", SemelClient::deleteAcls);
        register(ADMIN_COMMANDS, "upsert-scram", "upsert-scram USER SCRAM-SHA-256|SCRAM-SHA-512"
            + " PASSWORD ITERATIONS", "", SemelClient::upsertScram);
        register(ADMIN_COMMANDS, "delete-scram", "delete-scram USER SCRAM-SHA-256|SCRAM-SHA-512",
            "", SemelClient::deleteScram);
        register(ADMIN_COMMANDS, "describe-scram", "describe-scram [USER]...  (none: every user)",
            "", SemelClient::describeScram);
    }

    // ------------------------------------------------------------------ main

    static final PrintStream OUT = new PrintStream(
        new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16), false,
        StandardCharsets.UTF_8);

    static final class UsageError extends Exception {
        private static final long serialVersionUID = 1L;

        UsageError(String message) { super(message); }
    }

    public static void main(String[] argv) {
        silenceSlf4jWarning();
        int status;
        try {
            status = dispatch(argv);
        } catch (UsageError e) {
            System.err.println("usage error: " + e.getMessage());
            System.err.println("run with --help for usage");
            status = 2;
        } catch (Throwable t) {
            Throwable cause = unwrap(t);
            cause.printStackTrace();
            Json error = new Json().put("class", cause.getClass().getName()).put("message", cause.getMessage());
            Throwable root = cause;
            while (root.getCause() != null && root.getCause() != root) root = root.getCause();
            if (root != cause) {
                error.put("root_class", root.getClass().getName()).put("root_message", root.getMessage());
            }
            System.err.println("SEMEL_CLIENT_ERROR " + error);
            status = 1;
        }
        OUT.flush();
        System.err.flush();
        // the clients' non-daemon threads are closed, but exit explicitly all the same
        System.exit(status);
    }

    static int dispatch(String[] argv) throws Exception {
        if (argv.length == 0 || argv[0].equals("--help") || argv[0].equals("help")) {
            printHelp();
            return argv.length == 0 ? 2 : 0;
        }
        Spec spec = COMMANDS.get(argv[0]);
        if (spec == null) throw new UsageError("unknown command '" + argv[0] + "'");
        Args args = Args.parse(Arrays.copyOfRange(argv, 1, argv.length), spec.options());
        if (args.flag("help")) {
            OUT.println("usage: " + spec.usage());
            return 0;
        }
        spec.command().run(args);
        return 0;
    }

    static void printHelp() {
        OUT.println("usage: SemelClient <command> [options]; output is JSON lines on stdout");
        OUT.println("common options: --bootstrap HOST:PORT, --timeout-ms MS (default 30000),"
            + " --prop key=value (any client property, repeatable), --client-id ID");
        OUT.println("commands:");
        for (Spec s : COMMANDS.values()) OUT.println("  " + s.usage());
        OUT.println("admin subcommands:");
        for (Spec s : ADMIN_COMMANDS.values()) OUT.println("  admin " + s.usage());
    }

    static Throwable unwrap(Throwable t) {
        while ((t instanceof ExecutionException || t instanceof CompletionException) && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    /** slf4j-api 1.7 without a binding warns on stderr once; nothing of ours logs through it. */
    static void silenceSlf4jWarning() {
        PrintStream err = System.err;
        try {
            System.setErr(new PrintStream(OutputStream.nullOutputStream()));
            org.slf4j.LoggerFactory.getILoggerFactory();
        } finally {
            System.setErr(err);
        }
    }

    static void emit(Json json) {
        OUT.println(json);
        OUT.flush();
    }

    // ------------------------------------------------------------------ common client settings

    static Properties clientProps(Args a, String defaultClientId) throws UsageError {
        Properties p = new Properties();
        p.put("bootstrap.servers", a.required("bootstrap"));
        p.put("client.id", a.get("client-id", defaultClientId));
        return p;
    }

    /** --prop k=v pairs, applied last so a test can override anything set here. */
    static void applyProps(Properties p, Args a) throws UsageError {
        for (String kv : a.all("prop")) {
            int eq = kv.indexOf('=');
            if (eq <= 0) throw new UsageError("--prop expects key=value, got '" + kv + "'");
            p.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
    }

    static byte[] keyBytes(String prefix, long i) {
        return prefix == null ? null : (prefix + "-" + i).getBytes(StandardCharsets.UTF_8);
    }

    static byte[] valueBytes(String prefix, long i, int size) {
        StringBuilder sb = new StringBuilder(prefix).append('-').append(i);
        while (sb.length() < size) sb.append('.');
        return sb.toString().getBytes(StandardCharsets.UTF_8);
    }

    static long digest(byte[] key, byte[] value) {
        CRC32 crc = new CRC32();
        if (key != null) crc.update(key);
        crc.update(0);
        if (value != null) crc.update(value);
        return crc.getValue();
    }

    static String text(byte[] bytes) {
        return bytes == null ? null : new String(bytes, StandardCharsets.UTF_8);
    }

    /** Per-partition count and offset range, for summaries. */
    static final class PartitionStats {
        final TreeMap<Integer, long[]> byPartition = new TreeMap<>(); // {count, first, last}

        void add(int partition, long offset) {
            long[] s = byPartition.computeIfAbsent(partition, k -> new long[] {0, Long.MAX_VALUE, Long.MIN_VALUE});
            s[0]++;
            s[1] = Math.min(s[1], offset);
            s[2] = Math.max(s[2], offset);
        }

        Json toJson() {
            Json j = new Json();
            for (Map.Entry<Integer, long[]> e : byPartition.entrySet()) {
                long[] s = e.getValue();
                j.put(String.valueOf(e.getKey()),
                    new Json().put("count", s[0]).put("first_offset", s[1]).put("last_offset", s[2]));
            }
            return j;
        }
    }

    // ------------------------------------------------------------------ produce

    static void produce(Args a) throws Exception {
        String topic = a.required("topic");
        int count = a.getInt("count", 1);
        long start = a.getLong("start", 0);
        String keyPrefix = a.get("key-prefix", null);
        String valuePrefix = a.get("value-prefix", "value");
        int valueSize = a.getInt("value-size", 0);
        Integer partition = a.has("partition") ? a.getInt("partition", 0) : null;
        int timeoutMs = a.getInt("timeout-ms", 30000);
        int lingerMs = a.getInt("linger-ms", 5);
        int intervalMs = a.getInt("interval-ms", 0);

        Properties p = clientProps(a, "semel-java-producer");
        p.put(ProducerConfig.ACKS_CONFIG, a.get("acks", "all"));
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, a.get("compression", "none"));
        p.put(ProducerConfig.LINGER_MS_CONFIG, String.valueOf(lingerMs));
        if (a.has("idempotent")) p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, a.get("idempotent", "true"));
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(timeoutMs));
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs + lingerMs));
        applyProps(p, a);

        int[] partitions = new int[count];
        long[] offsets = new long[count];
        AtomicReference<Exception> firstError = new AtomicReference<>();
        long[] digests = new long[count];
        int sent = 0;
        long elapsedNs;
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            long t0 = System.nanoTime();
            for (int i = 0; i < count && firstError.get() == null; i++) {
                long n = start + i;
                byte[] key = keyBytes(keyPrefix, n);
                byte[] value = valueBytes(valuePrefix, n, valueSize);
                digests[i] = digest(key, value);
                final int index = i;
                partitions[index] = -1;
                try {
                    producer.send(new ProducerRecord<>(topic, partition, key, value), (md, ex) -> {
                        if (ex != null) {
                            firstError.compareAndSet(null, ex);
                        } else {
                            partitions[index] = md.partition();
                            offsets[index] = md.offset();
                        }
                    });
                } catch (RuntimeException e) { // send() throws what is not an ApiException
                    firstError.compareAndSet(null, e);
                }
                sent++;
                if (intervalMs > 0) Thread.sleep(intervalMs);
            }
            producer.flush(); // every callback has run once flush returns
            elapsedNs = System.nanoTime() - t0; // first send to the last acknowledgement
        }
        PartitionStats stats = new PartitionStats();
        long checksum = 0; // over acknowledged records
        int acked = 0;
        for (int i = 0; i < sent; i++) {
            if (partitions[i] < 0) continue;
            acked++;
            stats.add(partitions[i], offsets[i]);
            checksum += digests[i];
            if (a.flag("dump-acks")) {
                emit(new Json().put("type", "ack").put("index", start + i)
                    .put("partition", partitions[i]).put("offset", offsets[i]));
            }
        }
        emit(new Json().put("type", "produce_summary").put("topic", topic).put("count", count)
            .put("sent", sent).put("acked", acked).put("errors", sent - acked)
            .put("checksum", checksum).put("partitions", stats.toJson())
            .put("elapsed_ms", elapsedNs / 1e6));
        if (firstError.get() != null) throw firstError.get();
    }

    static Properties txnProducerProps(Args a, String transactionalId) throws UsageError {
        int timeoutMs = a.getInt("timeout-ms", 30000);
        Properties p = clientProps(a, "semel-java-txn-producer");
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.put(ProducerConfig.LINGER_MS_CONFIG, a.get("linger-ms", "5"));
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(timeoutMs));
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs + 5));
        applyProps(p, a);
        return p;
    }

    /** Transactions of --per-txn records each; transaction t (from 1) aborts when
     *  --abort-every divides it. The summary's checksum covers the committed records only. */
    static void txnProduce(Args a) throws Exception {
        String topic = a.required("topic");
        int count = a.getInt("count", 1);
        int perTxn = Math.max(1, a.getInt("per-txn", 10));
        int abortEvery = a.getInt("abort-every", 0);
        long start = a.getLong("start", 0);
        String keyPrefix = a.get("key-prefix", null);
        String valuePrefix = a.get("value-prefix", "value");
        Integer partition = a.has("partition") ? a.getInt("partition", 0) : null;
        Properties p = txnProducerProps(a, a.required("transactional-id"));
        long checksum = 0;
        int committedRecords = 0, abortedRecords = 0, commits = 0, aborts = 0;
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            for (int first = 0, txn = 1; first < count; first += perTxn, txn++) {
                int n = Math.min(perTxn, count - first);
                long txnChecksum = 0;
                producer.beginTransaction();
                for (int i = first; i < first + n; i++) {
                    byte[] key = keyBytes(keyPrefix, start + i);
                    byte[] value = valueBytes(valuePrefix, start + i, 0);
                    txnChecksum += digest(key, value);
                    producer.send(new ProducerRecord<>(topic, partition, key, value));
                }
                if (abortEvery > 0 && txn % abortEvery == 0) {
                    producer.flush(); // the records reach the log, then the abort hides them
                    producer.abortTransaction();
                    aborts++;
                    abortedRecords += n;
                } else {
                    producer.commitTransaction();
                    commits++;
                    committedRecords += n;
                    checksum += txnChecksum;
                }
            }
        }
        emit(new Json().put("type", "txn_produce_summary").put("topic", topic).put("count", count)
            .put("committed_transactions", commits).put("aborted_transactions", aborts)
            .put("committed", committedRecords).put("aborted", abortedRecords)
            .put("checksum", checksum));
    }

    /** Producer A begins a transaction and sends; producer B initializes the same
     *  transactional id (fencing A) and commits one record; A's commit then fails. */
    static void txnFence(Args a) throws Exception {
        String topic = a.required("topic");
        String id = a.required("transactional-id");
        Json result = new Json().put("type", "txn_fence");
        try (KafkaProducer<byte[], byte[]> first =
                 new KafkaProducer<>(txnProducerProps(a, id), new ByteArraySerializer(), new ByteArraySerializer())) {
            first.initTransactions();
            first.beginTransaction();
            first.send(new ProducerRecord<>(topic, 0, null, "first".getBytes(StandardCharsets.UTF_8))).get();
            try (KafkaProducer<byte[], byte[]> second =
                     new KafkaProducer<>(txnProducerProps(a, id), new ByteArraySerializer(), new ByteArraySerializer())) {
                second.initTransactions();
                second.beginTransaction();
                second.send(new ProducerRecord<>(topic, 0, null, "second".getBytes(StandardCharsets.UTF_8)));
                second.commitTransaction();
            }
            try {
                first.commitTransaction();
                result.put("first_commit", "ok");
            } catch (Exception e) {
                Throwable root = unwrap(e);
                result.put("first_commit", root.getClass().getName()).put("message", root.getMessage());
            }
        }
        emit(result);
    }

    /** Transactional steps, each reported as ok or with the exception the client raised:
     *  what a transactional application sees when an ACL is missing. */
    static void txnAclProbe(Args a) throws Exception {
        String topic = a.required("topic");
        String group = a.get("group", "probe-group");
        Properties p = txnProducerProps(a, a.required("transactional-id"));
        java.io.BufferedReader stdin = new java.io.BufferedReader(
            new java.io.InputStreamReader(System.in, StandardCharsets.UTF_8));
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            int sends = 0;
            for (String step : a.get("steps", "init,begin,send,offsets,commit").split(",")) {
                if (step.equals("pause")) {
                    emit(new Json().put("type", "paused"));
                    stdin.readLine();
                    continue;
                }
                Json line = new Json().put("type", "step").put("step", step);
                try {
                    switch (step) {
                        case "init" -> producer.initTransactions();
                        case "begin" -> producer.beginTransaction();
                        case "send" -> producer.send(new ProducerRecord<>(topic, 0, null,
                            ("probe-" + sends++).getBytes(StandardCharsets.UTF_8))).get();
                        case "offsets" -> producer.sendOffsetsToTransaction(
                            Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(1)),
                            new org.apache.kafka.clients.consumer.ConsumerGroupMetadata(group));
                        case "commit" -> producer.commitTransaction();
                        case "abort" -> producer.abortTransaction();
                        default -> throw new UsageError("unknown step '" + step + "'");
                    }
                    line.put("result", "ok");
                } catch (UsageError e) {
                    throw e;
                } catch (Exception e) {
                    Throwable cause = unwrap(e);
                    Throwable root = cause;
                    while (root.getCause() != null && root.getCause() != root) root = root.getCause();
                    line.put("result", "error").put("class", cause.getClass().getName())
                        .put("root_class", root.getClass().getName()).put("message", cause.getMessage());
                }
                emit(line);
            }
        }
    }

    /** An idempotent producer and (with --transactional-id) a transactional one, both on one
     *  partition, driven a step at a time from stdin so the test can act on the broker between
     *  steps (clean the log, restart the broker on the same listener) while the same producer
     *  ids go on. Steps, one per line: "send K V" (idempotent producer), "begin",
     *  "txn-send K V", "commit", "abort" (flushes first: the aborted records reach the log),
     *  "read ISOLATION" (a new consumer reads the partition from offset 0 to its end offset,
     *  the LSO for read_committed); V "-" is a tombstone (null value). Each step is answered
     *  with one line once done: {"type":"sent", step, key, value, offset}, {"type":"done",
     *  step}, or {"type":"read", isolation, records: [[offset, key, value], ...]}. End of stdin
     *  ends the run; a failed step ends it with the step's exception. --prop goes to the
     *  producers. */
    static void keyedSteps(Args a) throws Exception {
        String topic = a.required("topic");
        int partition = a.getInt("partition", 0);
        int timeoutMs = a.getInt("timeout-ms", 30000);
        Properties p = clientProps(a, "semel-java-keyed-producer");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(timeoutMs));
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
        applyProps(p, a);
        String transactionalId = a.get("transactional-id", null);
        java.io.BufferedReader stdin = new java.io.BufferedReader(
            new java.io.InputStreamReader(System.in, StandardCharsets.UTF_8));
        try (KafkaProducer<byte[], byte[]> plain =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
             KafkaProducer<byte[], byte[]> txn = transactionalId == null ? null
                 : new KafkaProducer<>(txnProducerProps(a, transactionalId), new ByteArraySerializer(),
                     new ByteArraySerializer())) {
            if (txn != null) txn.initTransactions();
            for (String line = stdin.readLine(); line != null; line = stdin.readLine()) {
                String[] w = line.trim().split(" ");
                String step = w[0];
                if (step.isEmpty()) continue;
                if ((step.equals("send") || step.equals("txn-send")) && w.length != 3) {
                    throw new UsageError(step + " takes a key and a value, got '" + line + "'");
                }
                if (txn == null && !step.equals("send") && !step.equals("read")) {
                    throw new UsageError(step + " needs --transactional-id");
                }
                switch (step) {
                    case "send", "txn-send" -> {
                        byte[] key = w[1].getBytes(StandardCharsets.UTF_8);
                        byte[] value = w[2].equals("-") ? null : w[2].getBytes(StandardCharsets.UTF_8);
                        KafkaProducer<byte[], byte[]> producer = step.equals("send") ? plain : txn;
                        long offset = producer.send(new ProducerRecord<>(topic, partition, key, value))
                            .get().offset();
                        emit(new Json().put("type", "sent").put("step", step).put("key", w[1])
                            .put("value", text(value)).put("offset", offset));
                    }
                    case "begin", "commit", "abort" -> {
                        if (step.equals("begin")) txn.beginTransaction();
                        else if (step.equals("commit")) txn.commitTransaction();
                        else {
                            txn.flush();
                            txn.abortTransaction();
                        }
                        emit(new Json().put("type", "done").put("step", step));
                    }
                    case "read" -> {
                        if (w.length != 2) throw new UsageError("read takes an isolation level");
                        emit(new Json().put("type", "read").put("isolation", w[1])
                            .put("records", readPartition(a, new TopicPartition(topic, partition), w[1], timeoutMs)));
                    }
                    default -> throw new UsageError("unknown step '" + step + "'");
                }
            }
        }
    }

    /** [offset, key, value] of every record of `tp` from offset 0 to its end offset for
     *  `isolation` (auto.offset.reset=none: an offset out of range fails the read). */
    static List<Object> readPartition(Args a, TopicPartition tp, String isolation, int timeoutMs)
            throws Exception {
        Properties p = clientProps(a, "semel-java-keyed-reader");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
        List<Object> records = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.assign(List.of(tp));
            consumer.seek(tp, 0);
            long end = consumer.endOffsets(List.of(tp)).get(tp);
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (consumer.position(tp) < end) {
                if (System.currentTimeMillis() > deadline) {
                    throw new TimeoutException("read " + records.size() + " records of " + tp
                        + ", position " + consumer.position(tp) + " short of " + end);
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    records.add(Arrays.asList(r.offset(), text(r.key()), text(r.value())));
                }
            }
        }
        return records;
    }

    /** The records `produce` would send, without a broker: lets tests check their own helpers. */
    static void records(Args a) throws Exception {
        int count = a.getInt("count", 1);
        long start = a.getLong("start", 0);
        String keyPrefix = a.get("key-prefix", null);
        String valuePrefix = a.get("value-prefix", "value");
        int valueSize = a.getInt("value-size", 0);
        long checksum = 0;
        for (int i = 0; i < count; i++) {
            long n = start + i;
            byte[] key = keyBytes(keyPrefix, n);
            byte[] value = valueBytes(valuePrefix, n, valueSize);
            checksum += digest(key, value);
            if (a.flag("dump")) {
                emit(new Json().put("type", "record").put("index", n).put("key", text(key)).put("value", text(value)));
            }
        }
        emit(new Json().put("type", "records_summary").put("count", count).put("checksum", checksum));
    }

    // ------------------------------------------------------------------ consume

    static void consume(Args a) throws Exception {
        String topic = a.required("topic");
        String group = a.get("group", null);
        boolean untilEnd = a.flag("until-end");
        int count = a.getInt("count", untilEnd ? Integer.MAX_VALUE : 1);
        int timeoutMs = a.getInt("timeout-ms", 30000);
        boolean summaryOnly = a.flag("summary-only");
        if (untilEnd && group != null) throw new UsageError("--until-end works without --group only");

        Properties p = clientProps(a, "semel-java-consumer");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, a.get("isolation", "read_uncommitted"));
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, a.flag("from-beginning") ? "earliest" : "latest");
        }
        applyProps(p, a);

        long deadline = System.currentTimeMillis() + timeoutMs;
        PartitionStats stats = new PartitionStats();
        Map<TopicPartition, OffsetAndMetadata> toCommit = new HashMap<>();
        long checksum = 0;
        int consumed = 0;
        boolean complete;
        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            Map<TopicPartition, Long> endOffsets = null;
            if (group != null) {
                consumer.subscribe(List.of(topic));
            } else {
                List<TopicPartition> tps = new ArrayList<>();
                if (a.has("partition")) {
                    tps.add(new TopicPartition(topic, a.getInt("partition", 0)));
                } else {
                    List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofMillis(timeoutMs));
                    if (infos == null || infos.isEmpty()) throw new TimeoutException("no partitions for topic " + topic);
                    for (PartitionInfo info : infos) tps.add(new TopicPartition(topic, info.partition()));
                }
                consumer.assign(tps);
                if (a.has("offset")) {
                    for (TopicPartition tp : tps) consumer.seek(tp, a.getLong("offset", 0));
                } else if (a.flag("from-beginning") || untilEnd) {
                    consumer.seekToBeginning(tps);
                } else {
                    consumer.seekToEnd(tps);
                }
                if (untilEnd) endOffsets = consumer.endOffsets(tps, Duration.ofMillis(timeoutMs));
            }
            while (consumed < count && !(untilEnd && reachedEnd(consumer, endOffsets))) {
                long remaining = deadline - System.currentTimeMillis();
                if (remaining <= 0) break;
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(Math.min(remaining, 200)))) {
                    if (consumed >= count) break;
                    consumed++;
                    checksum += digest(r.key(), r.value());
                    stats.add(r.partition(), r.offset());
                    toCommit.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    if (!summaryOnly) emit(recordJson(r));
                }
            }
            complete = consumed >= count || (untilEnd && reachedEnd(consumer, endOffsets));
            if (group != null && !a.flag("no-commit") && !toCommit.isEmpty()) {
                consumer.commitSync(toCommit, Duration.ofMillis(timeoutMs));
            }
        }
        emit(new Json().put("type", "consume_summary").put("topic", topic).put("count", consumed)
            .put("checksum", checksum).put("partitions", stats.toJson()));
        if (!complete && !a.flag("allow-fewer")) {
            String wanted = untilEnd ? "the end offsets" : count + " records";
            throw new TimeoutException("consumed " + consumed + " records, not " + wanted + ", within "
                + timeoutMs + " ms");
        }
    }

    static boolean reachedEnd(KafkaConsumer<byte[], byte[]> consumer, Map<TopicPartition, Long> endOffsets) {
        for (Map.Entry<TopicPartition, Long> e : endOffsets.entrySet()) {
            if (consumer.position(e.getKey()) < e.getValue()) return false;
        }
        return true;
    }

    static Json recordJson(ConsumerRecord<byte[], byte[]> r) {
        Json j = new Json().put("type", "record").put("topic", r.topic()).put("partition", r.partition())
            .put("offset", r.offset()).put("timestamp", r.timestamp())
            .put("timestamp_type", r.timestampType().name)
            .put("key", text(r.key())).put("value", text(r.value()));
        Header[] headers = r.headers().toArray();
        if (headers.length > 0) {
            Json h = new Json();
            for (Header header : headers) h.put(header.key(), text(header.value()));
            j.put("headers", h);
        }
        return j;
    }

    // ------------------------------------------------------------------ copier

    /**
     * The transactional copier of tests/chaos (tests/chaos/workloads/copier.py is the
     * confluent-kafka twin): consumes --input read_committed in --group and, per poll of up to
     * --txn-size records, begins a transaction, sends each record (same key and value, header
     * txn=<id>) to --output, sends the next offsets with the consumer's group metadata, then
     * aborts with probability --abort-ratio (and seeks back to the committed offsets) or
     * commits. An abortable error aborts and seeks back; a commit that times out is retried; a
     * fatal error (fenced, ...) ends the run with status 1. Runs until --stop-file exists, or with
 * --until-end until a poll comes back empty with every assigned partition's position at its end
 * offset (aborts seek back to the committed offsets, so then everything is committed).
 * --out-prefix P transforms each value into P + value (default: copied unchanged).
     * Output: one tests/chaos/history.py event per line (t, p, type, f, ...).
     */
    static void copier(Args a) throws Exception {
        String input = a.required("input");
        String output = a.required("output");
        String process = a.required("process");
        int session = a.getInt("session", 1);
        String sid = process + "." + session;
        int txnSize = a.getInt("txn-size", 300);
        double abortRatio = Double.parseDouble(a.get("abort-ratio", "0.33"));
        java.util.Random rng = new java.util.Random(a.getLong("seed", 0) * 7919L + session);
        java.nio.file.Path stop = a.has("stop-file") ? java.nio.file.Path.of(a.get("stop-file", "")) : null;
        int timeoutMs = a.getInt("timeout-ms", 30000);
        boolean untilEnd = a.flag("until-end");
        byte[] outPrefix = a.get("out-prefix", "").getBytes(StandardCharsets.UTF_8);
        HistoryOut h = new HistoryOut(process);

        Properties cp = clientProps(a, "semel-java-copier");
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, a.required("group"));
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, String.valueOf(txnSize));
        cp.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
        applyProps(cp, a);
        cp.remove(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG);
        Properties pp = clientProps(a, "semel-java-copier");
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, a.required("transactional-id"));
        pp.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(timeoutMs));
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        applyProps(pp, a);
        pp.remove(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG);

        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer());
             KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            consumer.subscribe(List.of(input), new org.apache.kafka.clients.consumer.ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    h.seek(sid, partitions, -1);
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    h.seek(sid, partitions, -1001);
                }
            });
            int n = 0;
            while (stop == null || !java.nio.file.Files.exists(stop)) {
                org.apache.kafka.clients.consumer.ConsumerRecords<byte[], byte[]> records =
                    consumer.poll(Duration.ofMillis(500));
                if (records.isEmpty()) {
                    if (untilEnd && !consumer.assignment().isEmpty()
                            && reachedEnd(consumer, consumer.endOffsets(consumer.assignment()))) {
                        break;
                    }
                    continue;
                }
                List<Object> polled = new ArrayList<>();
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    polled.add(Arrays.asList(r.topic(), r.partition(), r.offset(), text(r.value()), null));
                    next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                h.event("ok", "poll").put("c", sid).put("iso", "read_committed").put("records", polled).emit();
                String txn = sid + "-" + (++n);
                boolean commitInvoked = false;
                try {
                    producer.beginTransaction();
                    h.event("info", "begin").put("txn", txn).put("producer", sid).emit();
                    List<Object> writes = new ArrayList<>();
                    byte[] txnBytes = txn.getBytes(StandardCharsets.UTF_8);
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        long op = h.nextId();
                        byte[] outValue = r.value();
                        if (outPrefix.length > 0 && outValue != null) {
                            outValue = new byte[outPrefix.length + r.value().length];
                            System.arraycopy(outPrefix, 0, outValue, 0, outPrefix.length);
                            System.arraycopy(r.value(), 0, outValue, outPrefix.length, r.value().length);
                        }
                        String value = text(outValue);
                        h.event("invoke", "send").put("id", op).put("topic", output).put("value", value)
                            .put("key", text(r.key())).put("producer", sid).put("txn", txn)
                            .put("partition", null).emit();
                        ProducerRecord<byte[], byte[]> out = new ProducerRecord<>(output, null, r.key(), outValue);
                        out.headers().add("txn", txnBytes);
                        producer.send(out, (md, ex) -> {
                            if (ex == null) {
                                h.event("ok", "send").put("id", op).put("partition", md.partition())
                                    .put("offset", md.offset()).emit();
                            } else {
                                h.event("info", "send").put("id", op).put("error", ex.toString()).emit();
                            }
                        });
                        writes.add(Arrays.asList(output, value));
                    }
                    producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
                    if (rng.nextDouble() < abortRatio) {
                        h.event("invoke", "abort").put("txn", txn).put("producer", sid).emit();
                        producer.abortTransaction();
                        h.event("ok", "abort").put("txn", txn).put("producer", sid).emit();
                        seekToCommitted(consumer, h, sid);
                        continue;
                    }
                    h.event("invoke", "commit").put("txn", txn).put("producer", sid).put("writes", writes).emit();
                    commitInvoked = true;
                    for (int attempt = 1; ; attempt++) {
                        try {
                            producer.commitTransaction();
                            break;
                        } catch (TimeoutException e) { // the commit may still be under way: retry it
                            if (attempt >= 10) throw e;
                        }
                    }
                    h.event("ok", "commit").put("txn", txn).put("producer", sid).emit();
                } catch (org.apache.kafka.common.errors.ProducerFencedException
                         | org.apache.kafka.common.errors.OutOfOrderSequenceException
                         | org.apache.kafka.common.errors.AuthorizationException
                         | UnsupportedVersionException e) {
                    if (commitInvoked) h.event("info", "commit").put("txn", txn).put("producer", sid).put("error", e.toString()).emit();
                    throw e; // fatal for this producer: the runner starts a new copier
                } catch (org.apache.kafka.common.KafkaException e) { // abortable
                    h.event("invoke", "abort").put("txn", txn).put("producer", sid).emit();
                    try {
                        producer.abortTransaction();
                    } catch (org.apache.kafka.common.KafkaException fatal) {
                        h.event("info", "abort").put("txn", txn).put("producer", sid).put("error", fatal.toString()).emit();
                        if (commitInvoked) h.event("info", "commit").put("txn", txn).put("producer", sid).emit();
                        throw fatal;
                    }
                    h.event("ok", "abort").put("txn", txn).put("producer", sid).emit();
                    if (commitInvoked) {
                        h.event("fail", "commit").put("txn", txn).put("producer", sid).put("error", e.toString()).emit();
                    }
                    seekToCommitted(consumer, h, sid);
                }
            }
        }
    }

    static void seekToCommitted(KafkaConsumer<byte[], byte[]> consumer, HistoryOut h, String sid) {
        Set<TopicPartition> assigned = consumer.assignment();
        if (assigned.isEmpty()) return;
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
        List<Object> moved = new ArrayList<>();
        for (TopicPartition tp : assigned) {
            OffsetAndMetadata om = committed.get(tp);
            if (om == null) {
                consumer.seekToBeginning(List.of(tp));
                moved.add(Arrays.asList(tp.topic(), tp.partition(), -2));
            } else {
                consumer.seek(tp, om.offset());
                moved.add(Arrays.asList(tp.topic(), tp.partition(), om.offset()));
            }
        }
        h.event("info", "seek").put("c", sid).put("partitions", moved).emit();
    }

    /** tests/chaos/history.py events on stdout: {"t": epoch seconds, "p", "type", "f", ...}. */
    static final class HistoryOut {
        final String process;
        final java.util.concurrent.atomic.AtomicLong ids = new java.util.concurrent.atomic.AtomicLong();

        HistoryOut(String process) { this.process = process; }

        long nextId() { return ids.incrementAndGet(); }

        Event event(String type, String f) {
            java.time.Instant now = java.time.Instant.now();
            double t = now.getEpochSecond() + now.getNano() / 1e9;
            return new Event(new Json().put("t", t).put("p", process).put("type", type).put("f", f));
        }

        void seek(String sid, Collection<TopicPartition> partitions, long offset) {
            List<Object> parts = new ArrayList<>();
            for (TopicPartition tp : partitions) parts.add(Arrays.asList(tp.topic(), tp.partition(), offset));
            event("info", "seek").put("c", sid).put("partitions", parts).emit();
        }

        record Event(Json json) {
            Event put(String key, Object value) {
                json.put(key, value);
                return this;
            }

            void emit() {
                synchronized (OUT) {
                    SemelClient.emit(json);
                }
            }
        }
    }

    // ------------------------------------------------------------------ admin

    static Admin openAdmin(Args a) throws UsageError {
        int timeoutMs = a.getInt("timeout-ms", 30000);
        Properties p = clientProps(a, "semel-java-admin");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
        applyProps(p, a);
        return Admin.create(p);
    }

    static void admin(Args a) throws Exception {
        String sub = a.positional(0, "admin subcommand");
        Spec spec = ADMIN_COMMANDS.get(sub);
        if (spec == null) throw new UsageError("unknown admin subcommand '" + sub + "'");
        a.shift();
        spec.command().run(a);
    }

    static <T> T getOrNull(KafkaFuture<T> future) throws Exception {
        try {
            return future.get();
        } catch (ExecutionException e) {
            if (e.getCause() instanceof UnsupportedVersionException) return null;
            throw e;
        }
    }

    static void createTopic(Args a) throws Exception {
        String topic = a.positional(0, "topic");
        Integer partitions = a.has("partitions") ? a.getInt("partitions", 1) : null;
        Short rf = a.has("rf") ? (short) a.getInt("rf", 1) : null;
        NewTopic newTopic = new NewTopic(topic, java.util.Optional.ofNullable(partitions),
            java.util.Optional.ofNullable(rf));
        Map<String, String> configs = new LinkedHashMap<>();
        for (String kv : a.all("config")) {
            int eq = kv.indexOf('=');
            if (eq <= 0) throw new UsageError("--config expects key=value, got '" + kv + "'");
            configs.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        newTopic.configs(configs);
        try (Admin admin = openAdmin(a)) {
            CreateTopicsResult result = admin.createTopics(List.of(newTopic));
            result.all().get();
            Object topicId = getOrNull(result.topicId(topic));
            emit(new Json().put("type", "topic_created").put("topic", topic)
                .put("topic_id", topicId == null ? null : topicId.toString())
                .put("partitions", getOrNull(result.numPartitions(topic)))
                .put("replication_factor", getOrNull(result.replicationFactor(topic))));
        }
    }

    static void deleteTopic(Args a) throws Exception {
        String topic = a.positional(0, "topic");
        try (Admin admin = openAdmin(a)) {
            admin.deleteTopics(List.of(topic)).all().get();
            emit(new Json().put("type", "topic_deleted").put("topic", topic));
        }
    }

    static void listTopics(Args a) throws Exception {
        try (Admin admin = openAdmin(a)) {
            Set<String> names = admin.listTopics(new ListTopicsOptions().listInternal(a.flag("internal"))).names().get();
            emit(new Json().put("type", "topics").put("topics", new ArrayList<>(new java.util.TreeSet<>(names))));
        }
    }

    static void describeTopic(Args a) throws Exception {
        String topic = a.positional(0, "topic");
        try (Admin admin = openAdmin(a)) {
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            List<Object> partitions = new ArrayList<>();
            for (TopicPartitionInfo info : d.partitions()) {
                partitions.add(new Json().put("partition", info.partition())
                    .put("leader", info.leader() == null ? null : info.leader().id())
                    .put("replicas", nodeIds(info.replicas())).put("isr", nodeIds(info.isr())));
            }
            emit(new Json().put("type", "topic").put("name", d.name())
                .put("topic_id", d.topicId() == null ? null : d.topicId().toString())
                .put("internal", d.isInternal()).put("partitions", partitions));
        }
    }

    static List<Object> nodeIds(List<Node> nodes) {
        List<Object> ids = new ArrayList<>();
        for (Node n : nodes) ids.add(n.id());
        return ids;
    }

    static ConfigResource configResource(Args a) throws UsageError {
        if (a.has("broker")) return new ConfigResource(ConfigResource.Type.BROKER, a.get("broker", "0"));
        return new ConfigResource(ConfigResource.Type.TOPIC, a.positional(0, "topic"));
    }

    static void describeConfigs(Args a) throws Exception {
        ConfigResource resource = configResource(a);
        try (Admin admin = openAdmin(a)) {
            Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
            Json configs = new Json();
            List<ConfigEntry> entries = new ArrayList<>(config.entries());
            entries.sort((x, y) -> x.name().compareTo(y.name()));
            for (ConfigEntry e : entries) {
                configs.put(e.name(), new Json().put("value", e.value()).put("source", e.source().name())
                    .put("default", e.isDefault()).put("read_only", e.isReadOnly())
                    .put("sensitive", e.isSensitive()));
            }
            emit(new Json().put("type", "configs").put("resource_type", resource.type().name())
                .put("name", resource.name()).put("configs", configs));
        }
    }

    static void alterConfig(Args a) throws Exception {
        ConfigResource resource = configResource(a);
        List<AlterConfigOp> ops = new ArrayList<>();
        List<String> pairs = a.positionals().subList(resource.type() == ConfigResource.Type.TOPIC ? 1 : 0,
            a.positionals().size());
        for (String kv : pairs) {
            int eq = kv.indexOf('=');
            if (eq <= 0) throw new UsageError("expected key=value, got '" + kv + "'");
            ops.add(new AlterConfigOp(new ConfigEntry(kv.substring(0, eq), kv.substring(eq + 1)),
                AlterConfigOp.OpType.SET));
        }
        for (String key : a.all("delete")) {
            ops.add(new AlterConfigOp(new ConfigEntry(key, null), AlterConfigOp.OpType.DELETE));
        }
        if (ops.isEmpty()) throw new UsageError("nothing to alter: give key=value or --delete key");
        try (Admin admin = openAdmin(a)) {
            admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get();
            emit(new Json().put("type", "configs_altered").put("resource_type", resource.type().name())
                .put("name", resource.name()));
        }
    }

    static void describeCluster(Args a) throws Exception {
        try (Admin admin = openAdmin(a)) {
            DescribeClusterResult r = admin.describeCluster();
            List<Object> nodes = new ArrayList<>();
            for (Node n : r.nodes().get()) {
                nodes.add(new Json().put("id", n.id()).put("host", n.host()).put("port", n.port()).put("rack", n.rack()));
            }
            Node controller = r.controller().get();
            emit(new Json().put("type", "cluster").put("cluster_id", r.clusterId().get())
                .put("controller", controller == null ? null : controller.id()).put("nodes", nodes));
        }
    }

    static void createPartitions(Args a) throws Exception {
        String topic = a.positional(0, "topic");
        int total = parseInt(a.positional(1, "total partition count"), "total partition count");
        try (Admin admin = openAdmin(a)) {
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(total))).all().get();
            emit(new Json().put("type", "partitions_created").put("topic", topic).put("total", total));
        }
    }

    static void deleteRecords(Args a) throws Exception {
        String topic = a.positional(0, "topic");
        int partition = parseInt(a.positional(1, "partition"), "partition");
        long before = parseLong(a.positional(2, "offset"), "offset");
        TopicPartition tp = new TopicPartition(topic, partition);
        try (Admin admin = openAdmin(a)) {
            long low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(before)))
                .lowWatermarks().get(tp).get().lowWatermark();
            emit(new Json().put("type", "records_deleted").put("topic", topic).put("partition", partition)
                .put("low_watermark", low));
        }
    }

    static void listOffsets(Args a) throws Exception {
        String topic = a.positional(0, "topic");
        int partition = parseInt(a.positional(1, "partition"), "partition");
        String which = a.positional(2, "earliest|latest|max-timestamp|<timestamp-ms>");
        OffsetSpec spec = switch (which) {
            case "earliest" -> OffsetSpec.earliest();
            case "latest" -> OffsetSpec.latest();
            case "max-timestamp" -> OffsetSpec.maxTimestamp();
            default -> OffsetSpec.forTimestamp(parseLong(which, "timestamp"));
        };
        IsolationLevel isolation = IsolationLevel.valueOf(a.get("isolation", "read_uncommitted").toUpperCase());
        TopicPartition tp = new TopicPartition(topic, partition);
        try (Admin admin = openAdmin(a)) {
            ListOffsetsResult.ListOffsetsResultInfo info =
                admin.listOffsets(Map.of(tp, spec), new ListOffsetsOptions(isolation)).partitionResult(tp).get();
            emit(new Json().put("type", "offset").put("topic", topic).put("partition", partition)
                .put("offset", info.offset()).put("timestamp", info.timestamp())
                .put("leader_epoch", info.leaderEpoch().orElse(null)));
        }
    }

    // ------------------------------------------------------------------ argument parsing

    // ACLs: each ACL or filter is 7 positionals; results are printed as {"type": ..., "acls":
    // [{resource_type, name, pattern_type, principal, host, operation, permission}]}, sorted.

    static List<org.apache.kafka.common.acl.AclBindingFilter> aclFilters(Args a) throws UsageError {
        List<String> p = a.positionals();
        if (p.isEmpty() || p.size() % 7 != 0) throw new UsageError("expected 7 words per ACL, got " + p.size());
        List<org.apache.kafka.common.acl.AclBindingFilter> filters = new ArrayList<>();
        for (int i = 0; i < p.size(); i += 7) {
            filters.add(new org.apache.kafka.common.acl.AclBindingFilter(
                new org.apache.kafka.common.resource.ResourcePatternFilter(
                    org.apache.kafka.common.resource.ResourceType.fromString(p.get(i)), orAny(p.get(i + 1)),
                    org.apache.kafka.common.resource.PatternType.fromString(p.get(i + 2))),
                new org.apache.kafka.common.acl.AccessControlEntryFilter(orAny(p.get(i + 3)), orAny(p.get(i + 4)),
                    org.apache.kafka.common.acl.AclOperation.fromString(p.get(i + 5)),
                    org.apache.kafka.common.acl.AclPermissionType.fromString(p.get(i + 6)))));
        }
        return filters;
    }

    static String orAny(String word) { return word.equals("-") ? null : word; }

    static List<Object> aclsJson(Collection<org.apache.kafka.common.acl.AclBinding> acls) {
        List<org.apache.kafka.common.acl.AclBinding> sorted = new ArrayList<>(acls);
        sorted.sort((x, y) -> x.toString().compareTo(y.toString()));
        List<Object> out = new ArrayList<>();
        for (org.apache.kafka.common.acl.AclBinding b : sorted) {
            out.add(new Json().put("resource_type", b.pattern().resourceType().name())
                .put("name", b.pattern().name()).put("pattern_type", b.pattern().patternType().name())
                .put("principal", b.entry().principal()).put("host", b.entry().host())
                .put("operation", b.entry().operation().name())
                .put("permission", b.entry().permissionType().name()));
        }
        return out;
    }

    static void createAcls(Args a) throws Exception {
        List<org.apache.kafka.common.acl.AclBinding> acls = new ArrayList<>();
        for (org.apache.kafka.common.acl.AclBindingFilter f : aclFilters(a)) {
            acls.add(new org.apache.kafka.common.acl.AclBinding(
                new org.apache.kafka.common.resource.ResourcePattern(f.patternFilter().resourceType(),
                    f.patternFilter().name(), f.patternFilter().patternType()),
                new org.apache.kafka.common.acl.AccessControlEntry(f.entryFilter().principal(),
                    f.entryFilter().host(), f.entryFilter().operation(), f.entryFilter().permissionType())));
        }
        try (Admin admin = openAdmin(a)) {
            admin.createAcls(acls).all().get();
            emit(new Json().put("type", "acls_created").put("acls", aclsJson(acls)));
        }
    }

    static void describeAcls(Args a) throws Exception {
        List<org.apache.kafka.common.acl.AclBindingFilter> filters = aclFilters(a);
        if (filters.size() != 1) throw new UsageError("describe-acls takes one filter");
        try (Admin admin = openAdmin(a)) {
            emit(new Json().put("type", "acls").put("acls", aclsJson(admin.describeAcls(filters.get(0)).values().get())));
        }
    }

    static void deleteAcls(Args a) throws Exception {
        try (Admin admin = openAdmin(a)) {
            emit(new Json().put("type", "acls_deleted").put("acls", aclsJson(admin.deleteAcls(aclFilters(a)).all().get())));
        }
    }

    static void upsertScram(Args a) throws Exception {
        List<String> p = a.positionals();
        if (p.size() != 4) throw new UsageError("upsert-scram USER MECHANISM PASSWORD ITERATIONS");
        org.apache.kafka.clients.admin.ScramCredentialInfo info =
            new org.apache.kafka.clients.admin.ScramCredentialInfo(
                org.apache.kafka.clients.admin.ScramMechanism.fromMechanismName(p.get(1)),
                Integer.parseInt(p.get(3)));
        try (Admin admin = openAdmin(a)) {
            admin.alterUserScramCredentials(List.of(
                new org.apache.kafka.clients.admin.UserScramCredentialUpsertion(p.get(0), info, p.get(2))))
                .all().get();
            emit(new Json().put("type", "scram_altered").put("user", p.get(0)));
        }
    }

    static void deleteScram(Args a) throws Exception {
        List<String> p = a.positionals();
        if (p.size() != 2) throw new UsageError("delete-scram USER MECHANISM");
        try (Admin admin = openAdmin(a)) {
            admin.alterUserScramCredentials(List.of(
                new org.apache.kafka.clients.admin.UserScramCredentialDeletion(p.get(0),
                    org.apache.kafka.clients.admin.ScramMechanism.fromMechanismName(p.get(1)))))
                .all().get();
            emit(new Json().put("type", "scram_altered").put("user", p.get(0)));
        }
    }

    static void describeScram(Args a) throws Exception {
        try (Admin admin = openAdmin(a)) {
            Map<String, org.apache.kafka.clients.admin.UserScramCredentialsDescription> all =
                (a.positionals().isEmpty() ? admin.describeUserScramCredentials()
                    : admin.describeUserScramCredentials(a.positionals())).all().get();
            for (String user : new java.util.TreeSet<>(all.keySet())) {
                List<Object> credentials = new ArrayList<>();
                for (org.apache.kafka.clients.admin.ScramCredentialInfo info : all.get(user).credentialInfos()) {
                    credentials.add(new Json().put("mechanism", info.mechanism().mechanismName())
                        .put("iterations", info.iterations()));
                }
                emit(new Json().put("type", "scram_user").put("user", user).put("credentials", credentials));
            }
        }
    }

    static void listTransactions(Args a) throws Exception {
        try (Admin admin = openAdmin(a)) {
            for (org.apache.kafka.clients.admin.TransactionListing t : admin.listTransactions().all().get()) {
                emit(new Json().put("type", "transaction").put("transactional_id", t.transactionalId())
                    .put("producer_id", t.producerId()).put("state", t.state().toString()));
            }
        }
    }

    static void describeTransactions(Args a) throws Exception {
        if (a.positionals().isEmpty()) throw new UsageError("missing transactional id");
        try (Admin admin = openAdmin(a)) {
            Map<String, org.apache.kafka.clients.admin.TransactionDescription> all =
                admin.describeTransactions(a.positionals()).all().get();
            for (String id : a.positionals()) {
                org.apache.kafka.clients.admin.TransactionDescription d = all.get(id);
                List<Object> partitions = new ArrayList<>();
                for (TopicPartition tp : d.topicPartitions()) partitions.add(Arrays.asList(tp.topic(), tp.partition()));
                emit(new Json().put("type", "transaction").put("transactional_id", id)
                    .put("coordinator_id", d.coordinatorId()).put("state", d.state().toString())
                    .put("producer_id", d.producerId()).put("producer_epoch", d.producerEpoch())
                    .put("transaction_timeout_ms", d.transactionTimeoutMs())
                    .put("transaction_start_time_ms", d.transactionStartTimeMs().isPresent()
                        ? d.transactionStartTimeMs().getAsLong() : null)
                    .put("partitions", partitions));
            }
        }
    }

    static List<org.apache.kafka.clients.admin.ProducerState> activeProducers(Admin admin, TopicPartition tp)
            throws Exception {
        return admin.describeProducers(List.of(tp)).partitionResult(tp).get().activeProducers();
    }

    static void describeProducers(Args a) throws Exception {
        TopicPartition tp = new TopicPartition(a.positional(0, "topic"),
            parseInt(a.positional(1, "partition"), "partition"));
        try (Admin admin = openAdmin(a)) {
            for (org.apache.kafka.clients.admin.ProducerState p : activeProducers(admin, tp)) {
                emit(new Json().put("type", "producer").put("producer_id", p.producerId())
                    .put("producer_epoch", p.producerEpoch()).put("last_sequence", p.lastSequence())
                    .put("last_timestamp", p.lastTimestamp())
                    .put("coordinator_epoch", p.coordinatorEpoch().isPresent() ? p.coordinatorEpoch().getAsInt() : null)
                    .put("current_transaction_start_offset", p.currentTransactionStartOffset().isPresent()
                        ? p.currentTransactionStartOffset().getAsLong() : null));
            }
        }
    }

    static void fenceProducers(Args a) throws Exception {
        if (a.positionals().isEmpty()) throw new UsageError("missing transactional id");
        try (Admin admin = openAdmin(a)) {
            admin.fenceProducers(a.positionals()).all().get();
            for (String id : a.positionals()) {
                emit(new Json().put("type", "fenced").put("transactional_id", id));
            }
        }
    }

    static void abortTransaction(Args a) throws Exception {
        TopicPartition tp = new TopicPartition(a.positional(0, "topic"),
            parseInt(a.positional(1, "partition"), "partition"));
        if (!a.has("start-offset")) throw new UsageError("missing --start-offset");
        long startOffset = a.getLong("start-offset", -1);
        try (Admin admin = openAdmin(a)) {
            org.apache.kafka.clients.admin.ProducerState found = null;
            for (org.apache.kafka.clients.admin.ProducerState p : activeProducers(admin, tp)) {
                if (p.currentTransactionStartOffset().orElse(-1) == startOffset) found = p;
            }
            if (found == null) {
                throw new IllegalStateException("no open transaction starts at offset " + startOffset + " of " + tp);
            }
            int coordinatorEpoch = found.coordinatorEpoch().orElse(0);
            admin.abortTransaction(new org.apache.kafka.clients.admin.AbortTransactionSpec(
                tp, found.producerId(), (short) found.producerEpoch(), coordinatorEpoch)).all().get();
            emit(new Json().put("type", "aborted").put("topic", tp.topic()).put("partition", tp.partition())
                .put("producer_id", found.producerId()).put("producer_epoch", found.producerEpoch())
                .put("coordinator_epoch", coordinatorEpoch));
        }
    }

    static int parseInt(String s, String what) throws UsageError {
        try {
            return Integer.parseInt(s);
        } catch (NumberFormatException e) {
            throw new UsageError(what + ": expected an integer, got '" + s + "'");
        }
    }

    static long parseLong(String s, String what) throws UsageError {
        try {
            return Long.parseLong(s);
        } catch (NumberFormatException e) {
            throw new UsageError(what + ": expected an integer, got '" + s + "'");
        }
    }

    /** `--name value` options (repeatable), bare `--flag`s, and positionals in order. */
    static final class Args {
        final Map<String, List<String>> options = new HashMap<>();
        List<String> positionals = new ArrayList<>();

        static Args parse(String[] argv, Set<String> allowed) throws UsageError {
            Args a = new Args();
            for (int i = 0; i < argv.length; i++) {
                String arg = argv[i];
                if (!arg.startsWith("--")) {
                    a.positionals.add(arg);
                    continue;
                }
                String name = arg.substring(2);
                String value = "true";
                int eq = name.indexOf('=');
                if (eq >= 0) {
                    value = name.substring(eq + 1);
                    name = name.substring(0, eq);
                } else if (!FLAGS.contains(name)) {
                    if (i + 1 >= argv.length) throw new UsageError("--" + name + " needs a value");
                    value = argv[++i];
                }
                if (!allowed.contains(name)) throw new UsageError("unknown option --" + name);
                a.options.computeIfAbsent(name, k -> new ArrayList<>()).add(value);
            }
            return a;
        }

        boolean has(String name) { return options.containsKey(name); }

        boolean flag(String name) {
            List<String> v = options.get(name);
            return v != null && !v.get(v.size() - 1).equals("false");
        }

        String get(String name, String fallback) {
            List<String> v = options.get(name);
            return v == null ? fallback : v.get(v.size() - 1);
        }

        String required(String name) throws UsageError {
            String v = get(name, null);
            if (v == null) throw new UsageError("--" + name + " is required");
            return v;
        }

        List<String> all(String name) { return options.getOrDefault(name, List.of()); }

        int getInt(String name, int fallback) throws UsageError {
            String v = get(name, null);
            return v == null ? fallback : parseInt(v, "--" + name);
        }

        long getLong(String name, long fallback) throws UsageError {
            String v = get(name, null);
            return v == null ? fallback : parseLong(v, "--" + name);
        }

        List<String> positionals() { return positionals; }

        String positional(int index, String what) throws UsageError {
            if (index >= positionals.size()) throw new UsageError("missing " + what);
            return positionals.get(index);
        }

        void shift() { positionals = new ArrayList<>(positionals.subList(1, positionals.size())); }
    }

    // ------------------------------------------------------------------ JSON output

    /** A JSON object built field by field; values: null, String, Number, Boolean, Json, Collection. */
    static final class Json {
        private final StringBuilder sb = new StringBuilder("{");

        Json put(String key, Object value) {
            if (sb.length() > 1) sb.append(',');
            quote(sb, key);
            sb.append(':');
            write(sb, value);
            return this;
        }

        @Override
        public String toString() { return sb + "}"; }

        static void write(StringBuilder sb, Object v) {
            if (v == null) {
                sb.append("null");
            } else if (v instanceof Json j) {
                sb.append(j);
            } else if (v instanceof Number || v instanceof Boolean) {
                sb.append(v);
            } else if (v instanceof Collection<?> c) {
                sb.append('[');
                boolean first = true;
                for (Object o : c) {
                    if (!first) sb.append(',');
                    first = false;
                    write(sb, o);
                }
                sb.append(']');
            } else {
                quote(sb, v.toString());
            }
        }

        static void quote(StringBuilder sb, String s) {
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                switch (c) {
                    case '"' -> sb.append("\\\"");
                    case '\\' -> sb.append("\\\\");
                    case '\n' -> sb.append("\\n");
                    case '\r' -> sb.append("\\r");
                    case '\t' -> sb.append("\\t");
                    default -> {
                        if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                        else sb.append(c);
                    }
                }
            }
            sb.append('"');
        }
    }
}
