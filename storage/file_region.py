"""A byte range of a segment's `.log` file that a Fetch response sends as is (zero copy).

``PartitionLog.read(..., region_min=n)`` returns a ``FileRegion`` instead of bytes when it
would return at least n bytes: whole batches below the bound the read was given (the high
watermark or the last stable offset), already in the file. Those bytes do not change while
the region lives: appends go after them; the only truncation at run time (after a failed
fsync) cuts at the high watermark, at or above their end; retention, a cleaning's swap and a
topic deletion remove or replace the segment without writing to its file. So the length is
fixed when the region is made.

A region pins its segment: the segment's file stays open (and its renamed ``.deleted`` file
on disk) until ``release()``. The connection releases it once sent, or when it closes; a
region dropped unsent (a long poll reading again, a response dropped by fault injection)
releases itself when collected. Everything happens on the event loop.

The connection sends ``size`` bytes from ``fd`` at ``position`` with ``os.sendfile``; where it
cannot (no plain socket), ``read()`` gives the bytes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from semel.protocol.records import BatchHeader
    from semel.storage.segment import LogSegment

log = logging.getLogger("storage.file_region")


class FileRegion:
    __slots__ = ("_last", "_segment", "fd", "position", "size")

    def __init__(self, segment: LogSegment, fd: int, position: int, size: int,
                 last: BatchHeader | None = None) -> None:
        """Pins ``segment`` (the caller has checked the range holds whole batches);
        ``last`` is the header of the range's last batch when the caller read it."""
        self._segment: LogSegment | None = None  # set once pinned: __del__ unpins it
        segment.pin()
        self._segment = segment
        self.fd = fd
        self.position = position
        self.size = size
        self._last = last

    def __len__(self) -> int:
        return self.size

    @property
    def released(self) -> bool:
        return self._segment is None

    def read(self) -> bytes:
        """The bytes of the range (through the file-system seam), for a transport that
        cannot send from a file."""
        return self._pinned().read(self.position, self.size)

    def data_records(self) -> int:
        """Records of the data batches in the range (control batches left out), read from
        the batch headers (``LogSegment.data_records``) rather than from all the bytes."""
        return self._pinned().data_records(self.position, self.position + self.size)

    def end_offset(self) -> int:
        """One past the last offset of the range's last batch."""
        if self._last is None:
            end = self.position + self.size
            self._last = self._pinned().last_whole_batch(self.position, end)[1]
        return self._last.next_offset

    def release(self) -> None:
        """Unpin the segment (idempotent); a segment already closed for deletion closes its
        files now. An index write failing as it closes is logged: the data was sent."""
        segment, self._segment = self._segment, None
        if segment is not None:
            try:
                segment.unpin()
            except OSError as exc:
                log.error("%r: closing after its last reader failed: %s", segment, exc)

    def _pinned(self) -> LogSegment:
        if self._segment is None:
            raise ValueError("the file region was released")
        return self._segment

    def __del__(self) -> None:
        self.release()

    def __repr__(self) -> str:
        return (f"FileRegion({self._segment!r}, position={self.position}, size={self.size}"
                f"{', released' if self._segment is None else ''})")
