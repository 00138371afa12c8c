"""Deleting a topic whose name is as long as Kafka allows (249 characters): the renamed
directory's name is cut to fit the file system's 255 bytes (as Kafka does), so the data is
really deleted and does not come back when the topic is created again, even after a
restart. A stale directory that cannot be moved aside refuses the new partition instead of
serving its records."""

from __future__ import annotations

import uuid

from log_helpers import make_batch

from semel.storage.log_manager import MAX_FILE_NAME, doomed_dir_name
from tests.storage.test_log_manager import started

LONG = "t" * 249


def test_doomed_names_fit_and_keep_the_partition() -> None:
    unique = uuid.uuid4().hex
    for base in (f"{LONG}-0", f"{LONG[:200]}-12345", "short-7"):
        name = doomed_dir_name(f"/data/{base}", unique)
        last = name.rsplit("/", 1)[1]
        assert name.startswith("/data/") and len(last.encode()) <= MAX_FILE_NAME
        assert last.endswith(f"-{base.rsplit('-', 1)[1]}.{unique}-delete")
    assert doomed_dir_name("short-7", unique) == f"short-7.{unique}-delete"


async def test_long_topic_name_is_deleted_for_good(tmp_path) -> None:
    manager = await started(tmp_path)
    manager.create_topic(LONG, 1)
    manager.get_partition(LONG, 0).append(make_batch(2))
    manager.delete_topic(LONG)
    assert not (tmp_path / f"{LONG}-0").exists()
    await manager.purge_deleted()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("ttt")]
    manager.create_topic(LONG, 1)
    assert manager.get_partition(LONG, 0).log_end_offset == 0
    await manager.close()
    again = await started(tmp_path)
    assert again.get_partition(LONG, 0).log_end_offset == 0
    await again.close()
