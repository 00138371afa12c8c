"""Kafka's offset checkpoint files (OffsetCheckpointFile: ``log-start-offset-checkpoint``,
``cleaner-offset-checkpoint``): a version line ``0``, a count line, then one
``<topic> <partition> <offset>`` line per partition; written atomically (temp, fsync,
rename)."""

from __future__ import annotations

from pathlib import Path

from semel.storage.fs import RealFileSystem
from semel.storage.topic_partition import TopicPartition

VERSION = 0


def read_offset_checkpoint(fs: RealFileSystem, path: str | Path) -> dict[TopicPartition, int]:
    """The file's offsets; {} when it does not exist. Raises ValueError when malformed."""
    if not fs.exists(path):
        return {}
    lines = fs.read_file(path).decode("utf-8").splitlines()
    if not lines or lines[0].strip() != str(VERSION):
        raise ValueError(f"unknown version {lines[0] if lines else ''!r}")
    try:
        count = int(lines[1])
        entries = lines[2 : 2 + count]
        if len(entries) != count:
            raise ValueError(f"{count} entries declared, {len(entries)} present")
        result = {}
        for line in entries:
            topic, partition, offset = line.split()
            result[TopicPartition(topic, int(partition))] = int(offset)
    except IndexError:
        raise ValueError("truncated") from None
    return result


def write_offset_checkpoint(fs: RealFileSystem, path: str | Path,
                            offsets: dict[TopicPartition, int]) -> None:
    lines = [f"{tp.topic} {tp.partition} {offset}\n" for tp, offset in offsets.items()]
    text = f"{VERSION}\n{len(lines)}\n" + "".join(lines)
    fs.write_file_atomic(path, text.encode("utf-8"))
