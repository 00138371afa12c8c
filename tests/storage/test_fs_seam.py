"""The file-system seam: positional I/O, atomic replace, and FaultyFileSystem's faults and
power-loss model."""

from __future__ import annotations

import errno

import pytest

from semel.storage.fs import FaultyFileSystem, RealFileSystem


def test_pwrite_pread_truncate(tmp_path):
    fs = RealFileSystem()
    handle = fs.open(tmp_path / "f")
    handle.pwrite(b"hello world", 0)
    handle.pwrite(memoryview(b"WORLD"), 6)
    assert handle.pread(100, 0) == b"hello WORLD" and handle.size() == 11
    handle.truncate(5)
    assert handle.pread(100, 0) == b"hello"
    handle.fsync()
    handle.close()
    assert handle.closed
    with pytest.raises(FileNotFoundError):
        fs.open(tmp_path / "missing", create=False)


def test_write_file_atomic(tmp_path):
    fs = FaultyFileSystem()
    fs.write_file_atomic(tmp_path / "meta", b"one")
    fs.write_file_atomic(tmp_path / "meta", b"two")
    assert (tmp_path / "meta").read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta"]
    fs.simulate_power_loss()
    assert (tmp_path / "meta").read_bytes() == b"two"  # fsynced file, fsynced directory


def test_short_writes_are_looped(tmp_path):
    fs = FaultyFileSystem()
    fs.short_write = 3
    handle = fs.open(tmp_path / "f")
    handle.pwrite(b"0123456789", 0)
    assert handle.pread(10, 0) == b"0123456789" and fs.write_calls == 4


def test_write_errors_and_torn_writes(tmp_path):
    fs = FaultyFileSystem()
    handle = fs.open(tmp_path / "f")
    fs.write_error, fs.write_error_after = errno.ENOSPC, 4
    with pytest.raises(OSError) as info:
        handle.pwrite(b"0123456789", 0)
    assert info.value.errno == errno.ENOSPC
    assert handle.pread(10, 0) == b"0123"  # what a torn write leaves
    fs.path_filter = "other"
    handle.pwrite(b"ok", 0)  # the fault only applies to matching paths
    fs.clear_faults()
    fs.fsync_error = errno.EIO
    with pytest.raises(OSError):
        handle.fsync()
    fs.clear_faults()
    fs.truncate_error = errno.EIO
    with pytest.raises(OSError):
        handle.truncate(0)


def test_power_loss_model(tmp_path):
    (tmp_path / "old").write_bytes(b"existing")
    fs = FaultyFileSystem()
    old = fs.open(tmp_path / "old")
    old.pwrite(b"+more", 8)
    synced = fs.open(tmp_path / "synced")
    synced.pwrite(b"durable", 0)
    synced.fsync()
    synced.pwrite(b" and not", 7)
    fs.fsync_dir(tmp_path)
    orphan = fs.open(tmp_path / "orphan")  # created after the directory fsync
    orphan.pwrite(b"x", 0)
    orphan.fsync()
    assert fs.synced_length(tmp_path / "synced") == 7
    assert fs.fsync_calls[str(tmp_path / "synced")] == 1 and fs.total_fsyncs == 2
    fs.simulate_power_loss()
    assert (tmp_path / "old").read_bytes() == b"existing"
    assert (tmp_path / "synced").read_bytes() == b"durable"
    assert not (tmp_path / "orphan").exists()
