"""BufferedFrameReader (the BufferedProtocol framing): the same frames as FrameDecoder for
any chunking of the stream, zero-copy for large frames, limits checked before allocation,
memory charged as request bytes arrive (a size prefix alone charges nothing)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semel.protocol.errors import ProtocolError
from semel.protocol.frame import BufferedFrameReader, FrameDecoder, FrameTooLarge


def stream_of(frames: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(f)) + f for f in frames)


def read_all(reader: BufferedFrameReader, data: bytes, chunks: list[int]) -> list[bytes]:
    """Deliver ``data`` the way a socket would: into the buffers the reader hands out."""
    out: list[bytes] = []
    pos = 0
    i = 0
    while pos < len(data):
        buf = reader.get_buffer(-1)
        assert len(buf) > 0
        want = chunks[i % len(chunks)] if chunks else len(data)
        i += 1
        n = min(len(buf), want, len(data) - pos)
        buf[:n] = data[pos:pos + n]
        pos += n
        reader.buffer_updated(n)
        out += [bytes(f) for f in drain(reader)]
    return out


def drain(reader: BufferedFrameReader) -> list[memoryview]:
    frames = []
    while (frame := reader.next_frame()) is not None:
        frames.append(frame)
    return frames


@settings(max_examples=200, deadline=None)
@given(frames=st.lists(st.one_of(st.binary(max_size=40),
                                 st.binary(min_size=33000, max_size=140000)), max_size=6),
       chunks=st.lists(st.integers(min_value=1, max_value=70000), max_size=8))
def test_same_frames_as_frame_decoder_for_any_chunking(frames, chunks) -> None:
    data = stream_of(frames)
    expected = [bytes(f) for f in FrameDecoder().feed(data)]
    assert expected == frames
    assert read_all(BufferedFrameReader(scratch_size=65536), data, chunks) == frames


@settings(max_examples=200, deadline=None)
@given(frames=st.lists(st.one_of(st.binary(max_size=40),
                                 st.binary(min_size=33000, max_size=70000)), max_size=6),
       chunks=st.lists(st.integers(min_value=1, max_value=70000), max_size=8),
       takes=st.lists(st.integers(min_value=0, max_value=3), max_size=8),
       refused=st.booleans())
def test_ready_attribute_is_frame_ready_at_every_step(frames, chunks, takes, refused) -> None:
    """``ready`` (kept by buffer_updated and next_frame for the connection) equals the
    computed ``frame_ready`` after every call, whatever the chunking and however many frames
    are taken between reads; also for a size prefix the reader refuses."""
    check_ready(frames, chunks, takes, refused)


@pytest.mark.parametrize("chunk", range(1, 24))
@pytest.mark.parametrize("takes", [[0, 1], [1], [2, 0, 0]])
def test_ready_attribute_small_chunks(chunk, takes) -> None:
    """Every cut of a few small frames (the next frame's prefix or last bytes missing when
    one is taken)."""
    check_ready([b"a" * 10, b"b" * 3, b"", b"c" * 17, b"d"], [chunk], takes, False)


def check_ready(frames, chunks, takes, refused) -> None:
    data = stream_of(frames) + (struct.pack(">i", 1 << 30) + b"x" if refused else b"")
    reader = BufferedFrameReader(max_frame_size=1 << 20, scratch_size=65536)
    assert reader.ready == reader.frame_ready
    pos = i = 0
    while pos < len(data):
        buf = reader.get_buffer(-1)
        assert reader.ready == reader.frame_ready
        if len(buf) == 0:  # full of whole frames: take one
            reader.next_frame()
            continue
        n = min(len(buf), chunks[i % len(chunks)] if chunks else len(data), len(data) - pos)
        buf[:n] = data[pos:pos + n]
        pos += n
        reader.buffer_updated(n)
        assert reader.ready == reader.frame_ready
        for _ in range(takes[i % len(takes)] if takes else 1):
            try:
                reader.next_frame()
            except FrameTooLarge:
                assert refused and reader.ready == reader.frame_ready
                return
            assert reader.ready == reader.frame_ready
        i += 1
    while True:
        try:
            if reader.next_frame() is None:
                break
        except FrameTooLarge:
            break
        assert reader.ready == reader.frame_ready
    assert reader.ready == reader.frame_ready
    reader.close()
    assert reader.ready == reader.frame_ready


def test_byte_by_byte() -> None:
    frames = [b"a" * 10, b"b" * 40000, b"", b"c"]
    assert read_all(BufferedFrameReader(), stream_of(frames), [1]) == frames


def test_large_frame_is_read_in_place_and_writable() -> None:
    reader = BufferedFrameReader(scratch_size=65536)
    body = bytes(range(256)) * 1000
    data = stream_of([body])
    first = reader.get_buffer(-1)
    first[:1000] = data[:1000]
    reader.buffer_updated(1000)
    assert drain(reader) == []
    target = reader.get_buffer(-1)  # the frame's own buffer, after the 996 bytes already in
    assert len(target) == len(body) - 996
    target[:] = data[1000:]
    reader.buffer_updated(len(target))
    assert reader.frame_ready
    (frame,) = drain(reader)
    assert not frame.readonly and bytes(frame) == body


@pytest.mark.parametrize("size", [-1, -5, 1001])
def test_bad_sizes_fail_before_allocation(size: int) -> None:
    reader = BufferedFrameReader(max_frame_size=1000)
    buf = reader.get_buffer(-1)
    buf[:4] = struct.pack(">i", size)
    reader.buffer_updated(4)
    with pytest.raises(FrameTooLarge):
        reader.next_frame()


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300))
def test_random_bytes_only_protocol_errors(data: bytes) -> None:
    reader = BufferedFrameReader(max_frame_size=1 << 20)
    try:
        read_all(reader, data, [7])
    except ProtocolError:
        pass


def test_charges_bytes_as_they_arrive_not_the_declared_size() -> None:
    charged: list[int] = []
    reader = BufferedFrameReader(charge=charged.append)
    buf = reader.get_buffer(-1)
    buf[:5] = struct.pack(">i", 100 << 20) + b"x"  # a 100 MiB size prefix and one byte
    reader.buffer_updated(5)
    assert reader.next_frame() is None
    assert sum(charged) == 1 and reader.partial_stored == 1
    target = reader.get_buffer(-1)
    assert len(target) == (100 << 20) - 1
    target[:4096] = b"y" * 4096
    reader.buffer_updated(4096)
    assert sum(charged) == 4097 and not reader.frame_ready
    reader.close()
    assert reader.partial_stored == 0 and reader.buffered == 0


def test_small_frames_are_charged_when_taken_one_at_a_time() -> None:
    charged: list[int] = []
    reader = BufferedFrameReader(charge=charged.append)
    data = stream_of([b"a" * 10, b"b" * 20, b"c" * 30])
    buf = reader.get_buffer(-1)
    buf[:len(data)] = data
    reader.buffer_updated(len(data))
    assert reader.frame_ready and charged == []
    assert bytes(reader.next_frame()) == b"a" * 10 and charged == [10]
    assert reader.frame_ready and reader.buffered == len(data) - 14
    assert [bytes(f) for f in drain(reader)] == [b"b" * 20, b"c" * 30]
    assert charged == [10, 20, 30] and not reader.frame_ready and reader.buffered == 0


def test_drained_scratch_buffers_are_shared() -> None:
    first = BufferedFrameReader()
    buf = first.get_buffer(-1)
    buf[:6] = stream_of([b"hi"])
    first.buffer_updated(6)
    assert bytes(first.next_frame()) == b"hi"
    assert first.next_frame() is None and first.buffered == 0
    spare = BufferedFrameReader._spares[-1]
    second = BufferedFrameReader()
    second.get_buffer(-1)
    assert second._scratch is spare


@settings(max_examples=120, deadline=None)
@given(sizes=st.lists(st.one_of(st.integers(0, 40), st.integers(20000, 40000),
                                st.integers(33000, 140000)), max_size=6),
       chunks=st.lists(st.integers(min_value=1, max_value=70000), min_size=1, max_size=8),
       busy=st.lists(st.booleans(), min_size=1, max_size=8))
def test_a_busy_caller_reads_on_until_a_frame_is_ready(sizes, chunks, busy) -> None:
    """As a connection uses it: bytes keep arriving while the caller is busy with a request
    (it takes no frame), and stop only while the reader is ``full`` (frames waiting fill the
    read buffer, or a whole large frame waits). The buffer handed out is never empty, and the
    frames come out whole and in order."""
    frames = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    data = stream_of(frames)
    reader = BufferedFrameReader(scratch_size=65536)
    out: list[bytes] = []
    pos = i = 0
    while len(out) < len(frames):
        stuck = reader.full or pos == len(data)  # nothing to read: the request ends
        if stuck or not busy[i % len(busy)]:
            while (frame := reader.next_frame()) is not None:
                out.append(bytes(frame))
        if pos < len(data) and not reader.full:
            buf = reader.get_buffer(-1)
            assert len(buf) > 0
            n = min(len(buf), chunks[i % len(chunks)], len(data) - pos)
            buf[:n] = data[pos:pos + n]
            pos += n
            reader.buffer_updated(n)
        i += 1
    assert out == frames and reader.buffered == 0
