"""Record batch compression codecs (batch attributes bits 0-2).

Codec ids: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd. All four are done by ``cramjam``, one
Rust-backed library with wheels for every platform that covers gzip, raw snappy, the lz4
frame format and zstd. The wire formats, as Kafka's Java client writes and reads them:

- gzip: an RFC 1952 stream (Java's GZIPOutputStream); concatenated members are read too.
- snappy: Java writes snappy-java's *xerial* framing: a 16-byte header (magic
  ``b"\\x82SNAPPY\\x00"``, int32 version 1, int32 minimum compatible version 1), then blocks
  of int32 big-endian length + one raw snappy block (32 KiB of input each). librdkafka
  writes one raw snappy block. Readers: snappy-java falls back to a single raw block when
  the magic is missing, librdkafka and kafka-python detect the magic, so both forms are
  read by everyone. We read both and **write xerial framing**, the form Java itself writes
  and therefore the one every Kafka client has always read.
- lz4: the LZ4 frame format with *independent* blocks: Java's Lz4BlockInputStream rejects
  frames that declare dependent (linked) blocks. 64 KiB blocks, no content size.
- zstd: standard zstd frames (Java uses zstd-jni's streaming frames).

Decompression is bounded: ``decompress(codec, data, max_output)`` raises ``ProtocolError``
when the output would exceed ``max_output`` (a decompression bomb) without producing more
than that, and on corrupt input. Output sizes declared in the input (gzip ISIZE, lz4 content
size, zstd frame content size, snappy's length header) are used as hints to size the output
buffer and to refuse early, never trusted for safety. The broker mainly decompresses
(validation, internal topics, compaction); it compresses rarely.

``stream_decompress(codec, data, max_output)`` is the produce path's reader: it yields the
output in pieces of at most ``chunk_size`` bytes, so a caller walking the records holds a
bounded window, and stops with ``ProtocolError`` as soon as the output passes ``max_output``
(having produced at most one byte more). gzip streams through ``zlib`` (concatenated members;
anything else after a member is refused), lz4 through the ``lz4`` package's frame decoder and
zstd through ``zstandard``'s stream reader (concatenated frames), all three with an output
bound per call, which cramjam's streaming decompressors lack. Stricter than the one-shot
``decompress``, as Kafka's Java readers are: an lz4 frame must declare independent blocks
and nothing may follow it (Kafka's Lz4BlockInputStream reads exactly one frame); a zstd
stream must be whole frames (the frame and block headers are checked first, because the
stream reader reports a truncated frame as a quiet end), and a frame's window, the memory
its decoder needs, at most ``ZSTD_MAX_WINDOW`` (8 MiB, what compression levels up to 19
use; Kafka's zstd-jni allows 128 MiB). snappy has no bounded streaming
decoder: a raw block and each xerial block declare their output size up front, which is
checked against what remains of ``max_output`` before the block is decompressed whole.
"""

from __future__ import annotations

import importlib
import struct
import zlib
from collections.abc import Iterator
from enum import IntEnum

from semel.protocol.errors import ProtocolError


class _OnFirstUse:
    """A module imported when one of its attributes is first read, which then takes this
    stand-in's place among the module's globals: a broker whose clients never compress
    starts without loading cramjam, lz4 and zstandard (~8 ms, issue 18)."""

    def __init__(self, name: str, submodule: str | None = None) -> None:
        self._name = name
        self._submodule = submodule or name

    def __getattr__(self, attr: str):
        importlib.import_module(self._submodule)
        module = importlib.import_module(self._name)
        globals()[self._name] = module
        return getattr(module, attr)


cramjam = _OnFirstUse("cramjam")
lz4 = _OnFirstUse("lz4", "lz4.frame")  # used as lz4.frame
zstandard = _OnFirstUse("zstandard")

__all__ = ["STREAM_CHUNK", "CompressionType", "compress", "decompress", "stream_decompress"]


class CompressionType(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, minimum compatible version
_XERIAL_BLOCK_INPUT = 32 * 1024  # snappy-java's default block size
_INT32_BE = struct.Struct(">i")
_UINT32_LE = struct.Struct("<I")
_UINT64_LE = struct.Struct("<Q")
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_FIRST_GUESS_MIN = 64 * 1024  # output buffer size when the input declares none
_GROWTH = 4


def compress(codec: int, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
    """Compress ``data`` with ``codec`` in the format Kafka's Java client writes."""
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == CompressionType.SNAPPY:
        return _xerial_compress(data)
    if codec == CompressionType.LZ4:
        compressor = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        compressor.compress(data if type(data) is bytes else bytes(data))  # bytes only
        return bytes(compressor.finish())
    if codec == CompressionType.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3 if level is None else level))
    raise ValueError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | bytearray | memoryview, max_output: int) -> bytes:
    """Decompress ``data``; ProtocolError if it is corrupt or inflates beyond ``max_output``."""
    if codec == CompressionType.NONE:
        if len(data) > max_output:
            raise ProtocolError(f"uncompressed data of {len(data)} bytes exceeds {max_output}")
        return bytes(data)
    if codec == CompressionType.GZIP:
        hint = _UINT32_LE.unpack_from(data, len(data) - 4)[0] if len(data) >= 18 else None
        return _bounded("gzip", cramjam.gzip, data, hint, max_output)
    if codec == CompressionType.SNAPPY:
        if bytes(data[:8]) == XERIAL_MAGIC:
            return _xerial_decompress(data, max_output)
        return _raw_snappy(data, max_output)
    if codec == CompressionType.LZ4:
        return _bounded("lz4", cramjam.lz4, data, _lz4_content_size(data), max_output)
    if codec == CompressionType.ZSTD:
        return _bounded("zstd", cramjam.zstd, data, _zstd_content_size(data), max_output)
    raise ProtocolError(f"unknown compression codec {codec}")


# cramjam's message when decompress_into ran out of output space (any other error: corrupt)
_OUTPUT_FULL = "failed to write whole buffer"


def _bounded(name: str, codec, data, hint: int | None, max_output: int) -> bytes:
    """decompress_into a buffer of a guessed size, growing it up to max_output.

    cramjam's ``decompress_into`` stops with an error as soon as the buffer is full, so no
    attempt ever produces more than the buffer it was given.
    """
    if hint is not None and hint > max_output:
        raise ProtocolError(f"{name}: declared output of {hint} bytes exceeds {max_output}")
    if hint is None or hint == 0:
        size = min(max_output, max(_FIRST_GUESS_MIN, len(data) * 8))
    else:
        size = hint
    while True:
        out = bytearray(size)
        try:
            n = codec.decompress_into(data, out)
        except cramjam.DecompressionError as e:
            if _OUTPUT_FULL not in str(e):  # corrupt input: growing the buffer cannot help
                raise ProtocolError(f"{name}: corrupt data ({e})") from None
            if size >= max_output:
                raise ProtocolError(f"{name}: output larger than {max_output} bytes") from None
            size = min(max_output, max(size * _GROWTH, _FIRST_GUESS_MIN))
            continue
        except (ValueError, TypeError, OverflowError) as e:
            raise ProtocolError(f"{name}: {e}") from None
        return bytes(memoryview(out)[:n])


def _raw_snappy(data, max_output: int) -> bytes:
    try:
        size = cramjam.snappy.decompress_raw_len(data)
    except cramjam.DecompressionError as e:
        raise ProtocolError(f"snappy: {e}") from None
    if size > max_output:
        raise ProtocolError(f"snappy: declared output of {size} bytes exceeds {max_output}")
    out = bytearray(size)
    try:
        n = cramjam.snappy.decompress_raw_into(data, out)
    except cramjam.DecompressionError as e:
        raise ProtocolError(f"snappy: {e}") from None
    return bytes(memoryview(out)[:n])


def _xerial_compress(data) -> bytes:
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(view), _XERIAL_BLOCK_INPUT):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_INPUT]))
        parts.append(_INT32_BE.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _xerial_blocks(view: memoryview, max_output: int) -> Iterator[tuple[memoryview, int]]:
    """(raw snappy block, its declared output size) of a xerial stream, headers skipped
    (also where two streams were concatenated); the running total is held to max_output."""
    end = len(view)
    total = 0
    pos = 0
    while pos < end:
        if bytes(view[pos : pos + 8]) == XERIAL_MAGIC:
            if end - pos < _XERIAL_HEADER.size:
                raise ProtocolError("snappy: truncated xerial header")
            pos += _XERIAL_HEADER.size
            continue
        if end - pos < 4:
            raise ProtocolError(f"snappy: truncated xerial block length at {pos}")
        length = _INT32_BE.unpack_from(view, pos)[0]
        pos += 4
        if length < 0 or length > end - pos:
            raise ProtocolError(f"snappy: xerial block length {length} at {pos - 4} out of range")
        block = view[pos : pos + length]
        pos += length
        try:
            size = cramjam.snappy.decompress_raw_len(block)
        except cramjam.DecompressionError as e:
            raise ProtocolError(f"snappy: {e}") from None
        total += size
        if total > max_output:
            raise _too_large("snappy", max_output)
        yield block, size


def _snappy_block_into(block: memoryview, target) -> None:
    try:
        n = cramjam.snappy.decompress_raw_into(block, target)
    except cramjam.DecompressionError as e:
        raise ProtocolError(f"snappy: {e}") from None
    if n != len(target):
        raise ProtocolError(f"snappy: block produced {n} bytes, declared {len(target)}")


def _xerial_decompress(data, max_output: int) -> bytes:
    blocks = list(_xerial_blocks(memoryview(data).cast("B"), max_output))
    out = bytearray(sum(size for _, size in blocks))
    target = memoryview(out)
    offset = 0
    for block, size in blocks:
        _snappy_block_into(block, target[offset : offset + size])
        offset += size
    target.release()
    return bytes(out)


def _lz4_content_size(data) -> int | None:
    """The content size an lz4 frame header declares (FLG bit 3), else None."""
    if len(data) >= 15 and bytes(data[:4]) == _LZ4_MAGIC and data[4] & 0x08:
        return _UINT64_LE.unpack_from(data, 6)[0]
    return None


def _zstd_content_size(data) -> int | None:
    """Frame_Content_Size from the first zstd frame header (RFC 8878 3.1.1.1), else None."""
    if len(data) < 6 or bytes(data[:4]) != _ZSTD_MAGIC:
        return None
    descriptor = data[4]
    fcs_flag = descriptor >> 6
    single_segment = descriptor & 0x20
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03]
    size = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if size == 0 or len(data) < pos + size:
        return None
    value = int.from_bytes(data[pos : pos + size], "little")
    return value + 256 if size == 2 else value


# -- streaming, bounded (the produce path) ----------------------------------------------------

STREAM_CHUNK = 256 * 1024  # largest piece stream_decompress yields (snappy aside)
_FEED = 64 * 1024  # compressed bytes handed to a decompressor per call
# the size of the pieces lz4 and zstd streams yield: below malloc's mmap threshold, so each
# piece's buffer reuses heap memory (a fresh 256 KiB map per piece faults its pages in one by
# one: 15% more broker CPU per GB of zstd-compressed 100 B records)
_PIECE = 64 * 1024
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_SKIPPABLE = 0x184D2A50  # ..0x184D2A5F, little-endian magic of a skippable frame
# largest zstd window (decoder memory) accepted: what compression levels up to 19 use; a
# frame can otherwise make the decoder allocate up to 128 MiB however little it holds
ZSTD_MAX_WINDOW = 8 * 1024 * 1024
_UINT24_LE_MASK = 0xFFFFFF


def stream_decompress(
    codec: int,
    data: bytes | bytearray | memoryview,
    max_output: int,
    chunk_size: int = STREAM_CHUNK,
) -> Iterator[bytes | memoryview]:
    """Yield the decompressed ``data`` in pieces of at most ``chunk_size`` bytes.

    Raises ProtocolError on corrupt, truncated or trailing input, and as soon as the output
    passes ``max_output`` (no more than ``max_output + 1`` bytes are ever produced; snappy
    refuses from the sizes its blocks declare). Pieces may be empty.
    """
    view = memoryview(data).cast("B")
    if codec == CompressionType.NONE:
        if len(view) > max_output:
            raise ProtocolError(f"uncompressed data of {len(view)} bytes exceeds {max_output}")
        for start in range(0, len(view), chunk_size):
            yield view[start : start + chunk_size]
        return
    if codec == CompressionType.GZIP:
        yield from _gunzip_stream(view, max_output, chunk_size)
    elif codec == CompressionType.SNAPPY:
        yield from _snappy_stream(view, max_output, chunk_size)
    elif codec == CompressionType.LZ4:
        yield from _lz4_stream(view, max_output, chunk_size)
    elif codec == CompressionType.ZSTD:
        yield from _zstd_stream(view, max_output, chunk_size)
    else:
        raise ProtocolError(f"unknown compression codec {codec}")


def _too_large(name: str, max_output: int) -> ProtocolError:
    return ProtocolError(f"{name}: records decompress to more than {max_output} bytes")


def _gunzip_stream(view: memoryview, max_output: int, chunk_size: int) -> Iterator[bytes]:
    end = len(view)
    if end == 0:
        raise ProtocolError("gzip: no compressed data")
    pos = 0
    total = 0
    pending: bytes | memoryview = b""
    d = zlib.decompressobj(31)
    while True:
        if not pending and pos < end:
            pending = view[pos : pos + _FEED]
            pos += len(pending)
        limit = min(chunk_size, _PIECE, max_output - total + 1)
        try:
            out = d.decompress(pending, limit)
        except zlib.error as e:
            raise ProtocolError(f"gzip: corrupt data ({e})") from None
        pending = d.unconsumed_tail
        if out:
            total += len(out)
            if total > max_output:
                raise _too_large("gzip", max_output)
            yield out
        if d.eof:
            pos -= len(d.unused_data)  # the input after this member
            if pos >= end:
                return
            if bytes(view[pos : pos + 2]) != _GZIP_MAGIC:
                raise ProtocolError(
                    f"gzip: {end - pos} bytes that are not a gzip member follow the data"
                )
            d = zlib.decompressobj(31)
            pending = b""
        elif not out and not pending and pos >= end:
            raise ProtocolError("gzip: the compressed data is truncated")


def _lz4_stream(view: memoryview, max_output: int, chunk_size: int) -> Iterator[bytes]:
    end = len(view)
    if end < 7 or bytes(view[:4]) != _LZ4_MAGIC:
        raise ProtocolError("lz4: not an lz4 frame")
    if not view[4] & 0x20:
        raise ProtocolError(
            "lz4: dependent blocks are not supported (Kafka reads independent blocks only)"
        )
    d = lz4.frame.LZ4FrameDecompressor()
    pos = 0
    total = 0
    piece = min(chunk_size, _PIECE)
    while not d.eof:
        if d.needs_input:
            if pos >= end:
                raise ProtocolError("lz4: the compressed data is truncated")
            feed = view[pos : pos + _FEED]
            pos += len(feed)
        else:
            feed = b""
        try:
            out = d.decompress(feed, max_length=min(piece, max_output - total + 1))
        except RuntimeError as e:
            raise ProtocolError(f"lz4: corrupt data ({e})") from None
        if out:
            total += len(out)
            if total > max_output:
                raise _too_large("lz4", max_output)
            yield out
    if d.unused_data or pos < end:
        raise ProtocolError(
            f"lz4: {len(d.unused_data) + end - pos} bytes follow the end of the frame"
        )


# Decompression contexts between streams: making one costs as much as decompressing 16 KiB
# (a Java producer's batch). Each stream holds its own until it ends.
_zstd_contexts: list[zstandard.ZstdDecompressor] = []
_ZSTD_CONTEXTS_KEPT = 8


def _zstd_stream(view: memoryview, max_output: int, chunk_size: int) -> Iterator[bytes]:
    _check_zstd_frames(view)
    try:
        dctx = _zstd_contexts.pop()  # atomic: a stream may be driven from any thread
    except IndexError:
        dctx = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    reader = dctx.stream_reader(view, read_across_frames=True)  # resets the context
    total = 0
    piece = min(chunk_size, _PIECE)
    try:
        while True:
            out = reader.read(min(piece, max_output - total + 1))
            if not out:
                return
            total += len(out)
            if total > max_output:
                raise _too_large("zstd", max_output)
            yield out
    except zstandard.ZstdError as e:
        raise ProtocolError(f"zstd: corrupt data ({e})") from None
    finally:
        reader.close()
        if len(_zstd_contexts) < _ZSTD_CONTEXTS_KEPT:
            _zstd_contexts.append(dctx)


def _check_zstd_frames(view: memoryview) -> int:
    """The input is whole zstd frames (RFC 8878 3.1), skippable frames allowed, nothing else:
    walks the frame and block headers without decompressing. Returns how many frames (other
    than skippable ones) there are."""
    end = len(view)
    pos = 0
    frames = 0
    if end == 0:
        raise ProtocolError("zstd: no compressed data")
    while pos < end:
        if end - pos < 8:
            raise ProtocolError(f"zstd: {end - pos} bytes that are not a frame at {pos}")
        magic = _UINT32_LE.unpack_from(view, pos)[0]
        if magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE:
            pos += 8 + _UINT32_LE.unpack_from(view, pos + 4)[0]
            if pos > end:
                raise ProtocolError("zstd: truncated skippable frame")
            continue
        if bytes(view[pos : pos + 4]) != _ZSTD_MAGIC:
            raise ProtocolError(f"zstd: bytes that are not a frame at {pos}")
        descriptor = view[pos + 4]
        single_segment = descriptor & 0x20
        fcs_size = ((1 if single_segment else 0), 2, 4, 8)[descriptor >> 6]
        fcs_at = pos + 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03]
        if end < fcs_at + fcs_size:
            raise ProtocolError("zstd: the compressed data is truncated")
        if single_segment:  # the window is the content size
            window = int.from_bytes(view[fcs_at : fcs_at + fcs_size], "little")
            window += 256 if fcs_size == 2 else 0
        else:
            exponent, mantissa = view[pos + 5] >> 3, view[pos + 5] & 7
            window = (1 << (10 + exponent)) + ((1 << (10 + exponent)) >> 3) * mantissa
        if window > ZSTD_MAX_WINDOW:
            raise ProtocolError(
                f"zstd: a frame needs a window of {window} bytes, more than {ZSTD_MAX_WINDOW} "
                "(compression levels above 19 are not accepted)"
            )
        pos = fcs_at + fcs_size
        while True:
            if end - pos < 3:
                raise ProtocolError("zstd: the compressed data is truncated")
            block = int.from_bytes(view[pos : pos + 3], "little")
            pos += 3
            block_type = (block >> 1) & 3
            if block_type == 3:
                raise ProtocolError("zstd: corrupt data (reserved block type)")
            pos += 1 if block_type == 1 else block >> 3
            if block & 1:  # last block
                break
        if descriptor & 0x04:  # content checksum
            pos += 4
        if pos > end:
            raise ProtocolError("zstd: the compressed data is truncated")
        frames += 1
    return frames


def decompress_small(codec: int, data: bytes | bytearray | memoryview, limit: int) -> bytes | None:
    """A small lz4 or zstd payload decompressed in one call, when its headers show it is
    well framed and cannot produce more than ``limit`` bytes (lz4: its blocks times their
    declared maximum size; zstd: one frame declaring its content size, or an output buffer
    of ``limit``). None for anything else, or any error: ``stream_decompress`` then finds
    the same bytes, or the precise error. The produce path's quick walk of small batches
    (a Java producer's 16 KiB): no decompressor object, no generator."""
    view = memoryview(data).cast("B")
    try:
        if codec == CompressionType.LZ4:
            if _lz4_bound(view) > limit:
                return None
            out = lz4.frame.decompress(view)
        elif codec == CompressionType.ZSTD:
            if _check_zstd_frames(view) != 1 or bytes(view[:4]) != _ZSTD_MAGIC:
                return None
            declared = _zstd_content_size(view)
            # declared 0: python-zstandard answers b"" without reading the frame (nor its
            # checksum), so the stream decides
            if declared is not None and (declared > limit or declared == 0):
                return None
            try:
                dctx = _zstd_contexts.pop()
            except IndexError:
                dctx = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
            try:
                out = dctx.decompress(view, max_output_size=limit)
            finally:
                if len(_zstd_contexts) < _ZSTD_CONTEXTS_KEPT:
                    _zstd_contexts.append(dctx)
        else:
            return None
    except (ProtocolError, RuntimeError, zstandard.ZstdError):
        return None
    return out if len(out) <= limit else None


# lz4 frame descriptor (BD byte, bits 6-4): the largest block
_LZ4_BLOCK_MAX = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}


def _lz4_bound(view: memoryview) -> int:
    """Most bytes one lz4 frame with independent blocks, filling ``view`` exactly, can
    decompress to; a huge number for anything else."""
    end = len(view)
    if end < 7 or bytes(view[:4]) != _LZ4_MAGIC:
        return _UNBOUNDED
    flags, bd = view[4], view[5]
    if flags & 0xC2 != 0x40 or not flags & 0x20 or bd & 0x8F:
        return _UNBOUNDED  # version 01, no reserved bits, independent blocks
    block_max = _LZ4_BLOCK_MAX.get(bd >> 4)
    if block_max is None:
        return _UNBOUNDED
    pos = 7 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
    block_checksum = 4 if flags & 0x10 else 0
    blocks = 0
    while True:
        if end - pos < 4:
            return _UNBOUNDED
        size = _UINT32_LE.unpack_from(view, pos)[0]
        pos += 4
        if size == 0:
            break
        pos += (size & 0x7FFFFFFF) + block_checksum
        blocks += 1
    if pos + (4 if flags & 0x04 else 0) != end:
        return _UNBOUNDED
    return blocks * block_max


_UNBOUNDED = 1 << 62


def _snappy_stream(view: memoryview, max_output: int, chunk_size: int) -> Iterator[memoryview]:
    if bytes(view[:8]) != XERIAL_MAGIC:
        out = memoryview(_raw_snappy(view, max_output))
        for start in range(0, len(out), chunk_size):
            yield out[start : start + chunk_size]
        return
    for block, size in _xerial_blocks(view, max_output):
        out = bytearray(size)
        _snappy_block_into(block, memoryview(out))
        result = memoryview(out)
        for start in range(0, size, chunk_size):
            yield result[start : start + chunk_size]
