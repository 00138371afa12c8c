"""Opening a partition after clean and unclean shutdowns: nothing acknowledged is lost, torn
or corrupt tails are cut, indexes are rebuilt, and a clean restart does not scan the data."""

from __future__ import annotations

import logging
import os

import pytest
from log_helpers import make_batch, open_log, read_all

from semel.storage.config import LogConfig
from semel.storage.fs import FaultyFileSystem

CONFIG = LogConfig(segment_bytes=2000, index_interval_bytes=300)


def filled_log(directory, batches=60, config=CONFIG):
    plog = open_log(directory, config)
    for i in range(batches):
        plog.append(make_batch(1 + i % 3, value_size=30 + i % 50, fill=i))
    return plog


def flip_byte(path, position):
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0x5A]))


def files(directory):
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_clean_restart_keeps_everything_byte_for_byte(tmp_path):
    plog = filled_log(tmp_path)
    before, end = read_all(plog), plog.log_end_offset
    plog.close()
    on_disk = files(tmp_path)
    again = open_log(tmp_path, CONFIG)
    assert again.log_end_offset == again.high_watermark == end
    assert read_all(again) == before
    assert len(again.segments) > 3
    again.close()
    assert files(tmp_path) == on_disk  # reopening rewrote nothing


@pytest.mark.parametrize("clean", [True, False])
def test_restart_without_close_keeps_everything(tmp_path, clean):
    plog = filled_log(tmp_path)
    before, end = read_all(plog), plog.log_end_offset
    # no close(): the process died; the page cache still has every write
    again = open_log(tmp_path, CONFIG, clean=clean)
    assert again.log_end_offset == end
    assert read_all(again) == before
    assert again.append(make_batch(2)).base_offset == end


def active_log_path(plog):
    return plog.active_segment.path(".log")


@pytest.mark.parametrize("cut", [1, 3, 12, 61, 70])
def test_torn_tail_is_truncated(tmp_path, cut, caplog):
    plog = filled_log(tmp_path)
    last_batch_start = plog.active_segment.translate_offset(plog.log_end_offset - 1)[0]
    expected_end = plog.active_segment.translate_offset(plog.log_end_offset - 1)[1].base_offset
    before = read_all(plog)
    path = active_log_path(plog)
    size = os.path.getsize(path)
    cut = min(cut, size - last_batch_start - 1)
    os.truncate(path, size - cut)
    with caplog.at_level(logging.INFO, logger="storage"):
        again = open_log(tmp_path, CONFIG, clean=False)
    assert again.log_end_offset == expected_end
    assert os.path.getsize(path) == last_batch_start
    intact = read_all(again)
    assert before.startswith(intact) and len(intact) == len(before) - (size - last_batch_start)
    assert any("truncated" in r.message for r in caplog.records)


def test_garbled_last_batch_is_truncated(tmp_path):
    plog = filled_log(tmp_path)
    position, header = plog.active_segment.translate_offset(plog.log_end_offset - 1)
    before = read_all(plog)
    path = active_log_path(plog)
    flip_byte(path, position + 40)  # inside baseTimestamp: covered by the CRC
    again = open_log(tmp_path, CONFIG, clean=False)
    assert again.log_end_offset == header.base_offset
    assert before.startswith(read_all(again))


def test_garbage_after_the_last_batch_is_truncated(tmp_path):
    plog = filled_log(tmp_path)
    end, before = plog.log_end_offset, read_all(plog)
    path = active_log_path(plog)
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(b"\x00" * 100)  # a crash can leave a zero-filled tail
    again = open_log(tmp_path, CONFIG, clean=False)
    assert again.log_end_offset == end and read_all(again) == before
    assert os.path.getsize(path) == size


def test_corrupt_middle_of_older_segment_after_unclean_shutdown(tmp_path):
    plog = filled_log(tmp_path)
    victim = plog.segments[-3]
    # damage a batch after victim's last index entry, where the tail check looks
    positions = [p for p, _ in victim.iter_headers(victim.offset_index.last_position)]
    bad_position, bad_header = next(iter(victim.iter_headers(positions[-1])))
    flip_byte(victim.path(".log"), bad_position + 70)
    again = open_log(tmp_path, CONFIG, clean=False)
    assert again.log_end_offset == bad_header.base_offset
    assert [s.base_offset for s in again.segments][-1] == victim.base_offset
    assert not os.path.exists(plog.segments[-1].path(".log"))


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
@pytest.mark.parametrize("damage", ["missing", "short", "garbage"])
def test_damaged_indexes_are_rebuilt(tmp_path, suffix, damage, caplog):
    plog = filled_log(tmp_path)
    plog.close()
    on_disk = files(tmp_path)
    victims = sorted(name for name in on_disk if name.endswith(suffix) and on_disk[name])
    for name in victims:
        path = tmp_path / name
        if damage == "missing":
            path.unlink()
        elif damage == "short":
            path.write_bytes(on_disk[name][:-3])
        else:
            path.write_bytes(b"\x7f" * len(on_disk[name]))
    with caplog.at_level(logging.INFO, logger="storage"):
        again = open_log(tmp_path, CONFIG)
    assert any("index" in r.message for r in caplog.records)
    again.close()
    assert files(tmp_path) == on_disk


def test_clean_restart_reads_little(tmp_path):
    config = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=4096)
    plog = open_log(tmp_path, config)
    for i in range(1200):
        plog.append(make_batch(4, value_size=400, fill=i))
    size = plog.size_in_bytes
    assert size > 1_900_000 and len(plog.segments) > 25
    plog.close()
    fs = FaultyFileSystem()
    again = open_log(tmp_path, config, fs=fs)
    assert again.log_end_offset == 4800
    assert fs.bytes_read < 120 * 1024  # index tails and the active segment's tail only
    fs.bytes_read = 0
    open_log(tmp_path, config, fs=fs, clean=False)
    assert fs.bytes_read > 64 * 1024  # an unclean start verifies the active segment


def test_leftover_files_are_removed(tmp_path):
    plog = filled_log(tmp_path)
    plog.close()
    (tmp_path / "00000000000000000000.log.deleted").write_bytes(b"x")
    (tmp_path / "00000000000000099999.index").write_bytes(b"")
    (tmp_path / "00000000000000099999.timeindex").write_bytes(b"")
    (tmp_path / "00000000000000000000.log.cleaned").write_bytes(b"x")
    open_log(tmp_path, CONFIG)
    names = os.listdir(tmp_path)
    assert not [n for n in names if n.endswith((".deleted", ".cleaned")) or "99999" in n]


def test_empty_directory_starts_at_log_start_offset(tmp_path):
    plog = open_log(tmp_path / "p", log_start_offset=500)
    assert plog.log_start_offset == plog.log_end_offset == 500
    assert plog.append(make_batch(1)).base_offset == 500
    assert min(os.listdir(tmp_path / "p")) == "00000000000000000500.index"
