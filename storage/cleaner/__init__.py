"""The log cleaner (``cleanup.policy=compact``), Kafka's LogCleaner, transaction-aware.

Rooms: ``offset_map`` (key -> latest offset, bounded by ``log.cleaner.dedupe.buffer.size``),
``filter`` (which batches and records of the cleanable range survive: latest value per key,
no aborted data, tombstones and transaction markers removed in two passes with
``delete.retention.ms``, each producer's last batch kept for its sequence). The filter works
on bytes and decides alone; reading segments, writing ``.cleaned`` files and swapping them
in are the caller's.
"""
