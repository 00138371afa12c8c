// Writes a log segment with Apache Kafka's own record code (kafka-clients 3.9.1:
// MemoryRecordsBuilder builds the batches, MemoryRecords.withEndTransactionMarker the
// COMMIT/ABORT markers, and FileRecords.append writes them, the call Kafka's LogSegment
// makes), then reads the file back through FileRecords and prints what Kafka sees:
//   <dir>/00000000000000000000.log   the segment
//   <dir>/kafka-view.txt             one line per batch and record, in kafka-dump-log.sh's
//                                    --print-data-log line format, built from Kafka's objects
//   stdout                           one JSON object per batch (records inside), bytes base64
// Usage: java -cp kafka-clients.jar:... KafkaLogWriter <dir>

import java.io.File;
import java.io.PrintWriter;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;

import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.ControlRecordType;
import org.apache.kafka.common.record.EndTransactionMarker;
import org.apache.kafka.common.record.FileLogInputStream.FileChannelRecordBatch;
import org.apache.kafka.common.record.FileRecords;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.MemoryRecordsBuilder;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.record.TimestampType;

public class KafkaLogWriter {
    static final int LEADER_EPOCH = 4;
    static long nextOffset = 0;

    static byte[] utf8(String s) {
        return s == null ? null : s.getBytes(StandardCharsets.UTF_8);
    }

    static MemoryRecords batch(Compression compression, TimestampType type, long logAppendTime,
                               long producerId, short epoch, int baseSequence,
                               boolean transactional, String[][] records, long timestamp) {
        ByteBuffer buffer = ByteBuffer.allocate(1 << 16);
        MemoryRecordsBuilder builder = MemoryRecords.builder(buffer, RecordBatch.MAGIC_VALUE_V2,
            compression, type, nextOffset, logAppendTime, producerId, epoch, baseSequence,
            transactional, LEADER_EPOCH);
        for (String[] r : records) {
            List<Header> headers = new ArrayList<>();
            for (int i = 2; i + 1 < r.length; i += 2) {
                headers.add(new RecordHeader(r[i], utf8(r[i + 1])));
            }
            builder.appendWithOffset(nextOffset++, timestamp++, utf8(r[0]), utf8(r[1]),
                headers.toArray(new Header[0]));
        }
        return builder.build();
    }

    static MemoryRecords marker(ControlRecordType type, long producerId, short epoch,
                                int coordinatorEpoch, long timestamp) {
        return MemoryRecords.withEndTransactionMarker(nextOffset++, timestamp, LEADER_EPOCH,
            producerId, epoch, new EndTransactionMarker(type, coordinatorEpoch));
    }

    static String pad(String s) {
        StringBuilder b = new StringBuilder(s);
        while (b.length() < 120) b.append('.');
        return b.toString();
    }

    static String b64(ByteBuffer buf) {
        if (buf == null) return "null";
        byte[] bytes = new byte[buf.remaining()];
        buf.duplicate().get(bytes);
        return "\"" + Base64.getEncoder().encodeToString(bytes) + "\"";
    }

    static String str(ByteBuffer buf) {
        byte[] bytes = new byte[buf.remaining()];
        buf.duplicate().get(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }

    public static void main(String[] args) throws Exception {
        File dir = new File(args[0]);
        File file = new File(dir, "00000000000000000000.log");
        List<MemoryRecords> all = new ArrayList<>();
        long none = RecordBatch.NO_PRODUCER_ID;
        short noEpoch = RecordBatch.NO_PRODUCER_EPOCH;
        int noSeq = RecordBatch.NO_SEQUENCE;
        // plain: headers, a null key, a null value
        all.add(batch(Compression.NONE, TimestampType.CREATE_TIME, -1, none, noEpoch, noSeq, false,
            new String[][] {{"k0", "v0", "a", "1", "b", "2"}, {null, "v1"}, {"k2", null}}, 1000));
        // one batch per codec
        Compression[] codecs = {Compression.gzip().build(), Compression.snappy().build(),
            Compression.lz4().build(), Compression.zstd().build()};
        String[] names = {"gzip", "snappy", "lz4", "zstd"};
        for (int c = 0; c < codecs.length; c++) {
            all.add(batch(codecs[c], TimestampType.CREATE_TIME, -1, none, noEpoch, noSeq, false,
                new String[][] {{names[c] + "-0", pad(names[c] + "-value-0")},
                    {names[c] + "-1", pad(names[c] + "-value-1"), "h", "x"}}, 2000 + 10 * c));
        }
        // idempotent
        all.add(batch(Compression.NONE, TimestampType.CREATE_TIME, -1, 7000L, (short) 3, 0, false,
            new String[][] {{"i0", "idem-0"}, {"i1", "idem-1"}, {"i2", "idem-2"}}, 3000));
        // a committed transaction, then an aborted one
        all.add(batch(Compression.lz4().build(), TimestampType.CREATE_TIME, -1, 8000L, (short) 1, 0,
            true, new String[][] {{"t0", "txn-commit-0"}, {"t1", "txn-commit-1"}}, 4000));
        all.add(marker(ControlRecordType.COMMIT, 8000L, (short) 1, 5, 4010));
        all.add(batch(Compression.NONE, TimestampType.CREATE_TIME, -1, 8001L, (short) 2, 0, true,
            new String[][] {{"a0", "txn-abort-0"}, {"a1", "txn-abort-1"}}, 5000));
        all.add(marker(ControlRecordType.ABORT, 8001L, (short) 2, 6, 5010));
        // log append time
        all.add(batch(Compression.NONE, TimestampType.LOG_APPEND_TIME, 9000, none, noEpoch, noSeq,
            false, new String[][] {{"l0", "lat-0"}, {"l1", "lat-1"}}, 6000));

        try (FileRecords records = FileRecords.open(file)) {
            for (MemoryRecords m : all) records.append(m);
            records.flush();
        }

        try (FileRecords records = FileRecords.open(file, false);
             PrintWriter text = new PrintWriter(new File(dir, "kafka-view.txt"), "UTF-8")) {
            long position = 0;
            for (FileChannelRecordBatch batch : records.batches()) {
                text.println("baseOffset: " + batch.baseOffset() + " lastOffset: " + batch.lastOffset()
                    + " count: " + batch.countOrNull() + " baseSequence: " + batch.baseSequence()
                    + " lastSequence: " + batch.lastSequence() + " producerId: " + batch.producerId()
                    + " producerEpoch: " + batch.producerEpoch() + " partitionLeaderEpoch: "
                    + batch.partitionLeaderEpoch() + " isTransactional: " + batch.isTransactional()
                    + " isControl: " + batch.isControlBatch() + " deleteHorizonMs: "
                    + batch.deleteHorizonMs() + " position: " + position + " "
                    + batch.timestampType() + ": " + batch.maxTimestamp() + " size: "
                    + batch.sizeInBytes() + " magic: " + batch.magic() + " compresscodec: "
                    + batch.compressionType().name + " crc: " + batch.checksum() + " isvalid: "
                    + batch.isValid());
                StringBuilder json = new StringBuilder();
                json.append("{\"baseOffset\": ").append(batch.baseOffset())
                    .append(", \"lastOffset\": ").append(batch.lastOffset())
                    .append(", \"count\": ").append(batch.countOrNull())
                    .append(", \"producerId\": ").append(batch.producerId())
                    .append(", \"producerEpoch\": ").append(batch.producerEpoch())
                    .append(", \"baseSequence\": ").append(batch.baseSequence())
                    .append(", \"isTransactional\": ").append(batch.isTransactional())
                    .append(", \"isControl\": ").append(batch.isControlBatch())
                    .append(", \"position\": ").append(position)
                    .append(", \"size\": ").append(batch.sizeInBytes())
                    .append(", \"crc\": ").append(batch.checksum())
                    .append(", \"compresscodec\": \"").append(batch.compressionType().name)
                    .append("\", \"maxTimestamp\": ").append(batch.maxTimestamp())
                    .append(", \"records\": [");
                boolean first = true;
                for (Record record : batch) {
                    StringBuilder line = new StringBuilder("| offset: " + record.offset() + " "
                        + batch.timestampType() + ": " + record.timestamp() + " keySize: "
                        + record.keySize() + " valueSize: " + record.valueSize() + " sequence: "
                        + record.sequence() + " headerKeys: [");
                    StringBuilder headers = new StringBuilder("[");
                    Header[] hs = record.headers();
                    for (int i = 0; i < hs.length; i++) {
                        line.append(i > 0 ? "," : "").append(hs[i].key());
                        headers.append(i > 0 ? ", " : "").append("[\"").append(hs[i].key())
                            .append("\", ").append(b64(hs[i].value() == null ? null
                                : ByteBuffer.wrap(hs[i].value()))).append("]");
                    }
                    line.append("]");
                    headers.append("]");
                    if (batch.isControlBatch()) {
                        EndTransactionMarker m = EndTransactionMarker.deserialize(record);
                        line.append(" endTxnMarker: ").append(m.controlType())
                            .append(" coordinatorEpoch: ").append(m.coordinatorEpoch());
                    } else {
                        if (record.hasKey()) line.append(" key: ").append(str(record.key()));
                        if (record.hasValue()) line.append(" payload: ").append(str(record.value()));
                    }
                    text.println(line);
                    json.append(first ? "" : ", ").append("{\"offset\": ").append(record.offset())
                        .append(", \"timestamp\": ").append(record.timestamp())
                        .append(", \"sequence\": ").append(record.sequence())
                        .append(", \"key\": ").append(b64(record.key()))
                        .append(", \"value\": ").append(b64(record.value()))
                        .append(", \"headers\": ").append(headers).append("}");
                    first = false;
                }
                json.append("]}");
                System.out.println(json);
                position += batch.sizeInBytes();
            }
        }
    }
}
