/*
 * BenchProducer: one Java kafka-clients producer process for bench/run.py and bench/bench_ab.py,
 * speaking the same start barrier as the Python load generators (bench/clients.py).
 *
 * Usage: java BenchProducer --bootstrap B --topic T --partition P --records N --size S
 *            --values FILE [--compression none|lz4|zstd|...] [--linger-ms 5] [--prop k=v]...
 *
 * Record i's value is the i-th S-byte slice of FILE (bench/values.py's text), cycling; no key.
 * Before the barrier: the producer is created and one record is sent and acknowledged
 * (connection, metadata and, idempotent by default, the producer id are in place); then it
 * prints READY and waits for GO on stdin. Measured: first send to the last acknowledgement
 * (flush), and the JVM's own CPU time over it (all threads: sender, GC, JIT). The result is
 * one JSON line: records, bytes (acknowledged), errors, first_error, start/end in seconds of
 * System.nanoTime() (CLOCK_MONOTONIC on Linux, the clock of Python's time.monotonic()), cpu_s.
 * Client settings are kafka-clients 3.9 defaults (idempotent, batch.size 16 KiB, max.in.flight
 * 5, buffer.memory 32 MiB) except acks=all, linger.ms 5 and what --prop sets.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class BenchProducer {
    public static void main(String[] argv) {
        try {
            run(argv);
        } catch (Throwable e) {
            System.out.println("{\"role\": \"java_produce\", \"error\": " + quote(e.toString()) + "}");
            System.out.flush();
            System.exit(1);
        }
    }

    static void run(String[] argv) throws Exception {
        String bootstrap = null, topic = null, valuesFile = null, compression = "none";
        int partition = 0, size = 0, lingerMs = 5;
        long records = 0;
        List<String> props = new ArrayList<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            String v = argv[i + 1];
            switch (argv[i]) {
                case "--bootstrap": bootstrap = v; break;
                case "--topic": topic = v; break;
                case "--partition": partition = Integer.parseInt(v); break;
                case "--records": records = Long.parseLong(v); break;
                case "--size": size = Integer.parseInt(v); break;
                case "--values": valuesFile = v; break;
                case "--compression": compression = v; break;
                case "--linger-ms": lingerMs = Integer.parseInt(v); break;
                case "--prop": props.add(v); break;
                default: throw new IllegalArgumentException("unknown option " + argv[i]);
            }
        }
        if (bootstrap == null || topic == null || valuesFile == null || size <= 0) {
            throw new IllegalArgumentException("--bootstrap, --topic, --values and --size are required");
        }
        byte[] text = Files.readAllBytes(Paths.get(valuesFile));
        int n = text.length / size;
        byte[][] values = new byte[n][];
        for (int i = 0; i < n; i++) {
            values[i] = java.util.Arrays.copyOfRange(text, i * size, (i + 1) * size);
        }

        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "semel-bench-java");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        p.put(ProducerConfig.LINGER_MS_CONFIG, String.valueOf(lingerMs));
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "120000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "300000");
        for (String kv : props) {
            int eq = kv.indexOf('=');
            if (eq <= 0) throw new IllegalArgumentException("--prop expects key=value: " + kv);
            p.put(kv.substring(0, eq), kv.substring(eq + 1));
        }

        AtomicLong errors = new AtomicLong();
        AtomicReference<String> firstError = new AtomicReference<>();
        Callback callback = (md, ex) -> {
            if (ex != null) {
                errors.incrementAndGet();
                firstError.compareAndSet(null, ex.toString());
            }
        };
        com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.send(new ProducerRecord<>(topic, partition, null,
                "warm-up".getBytes(StandardCharsets.UTF_8))).get(120, TimeUnit.SECONDS);
            System.out.println("READY");
            System.out.flush();
            BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in));
            String go = stdin.readLine();
            if (go == null || !go.trim().equals("GO")) return;

            long cpu0 = os.getProcessCpuTime();
            long t0 = System.nanoTime();
            for (long i = 0; i < records; i++) {
                producer.send(new ProducerRecord<>(topic, partition, null, values[(int) (i % n)]),
                    callback);
            }
            producer.flush();
            long t1 = System.nanoTime();
            long cpu1 = os.getProcessCpuTime();
            long acked = records - errors.get();
            String first = firstError.get();
            System.out.println("{\"role\": \"java_produce\", \"records\": " + acked
                + ", \"bytes\": " + acked * size + ", \"errors\": " + errors.get()
                + ", \"first_error\": " + (first == null ? "null" : quote(first))
                + ", \"start\": " + t0 / 1e9 + ", \"end\": " + t1 / 1e9
                + ", \"cpu_s\": " + (cpu1 - cpu0) / 1e9 + "}");
            System.out.flush();
        }
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }
}
