"""The log cleaner (``cleanup.policy=compact``), Kafka's LogCleaner, transaction-aware.

Rooms, in the order a cleaning uses them: ``selection`` (which partition, and its cleanable
range), ``offset_map`` (key -> latest offset, bounded by ``log.cleaner.dedupe.buffer.size``),
``filter`` (which batches and records survive: latest value per key, no aborted data,
tombstones and transaction markers removed in two passes with ``delete.retention.ms``, each
producer's last batch kept for its sequence; works on bytes and decides alone), ``writer``
(groups of segments written as ``.cleaned`` segments), ``cleaner`` (one cleaning end to end
and the ``cleaner-offset-checkpoint``). The swap is ``PartitionLog.replace_segments``; an
interrupted one is completed by ``storage.recovery``.
"""
