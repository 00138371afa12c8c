"""A file system whose fsyncs can be held, as a disk that has not answered yet: for tests of
what waits on durability (acks=all answers, transaction records)."""

from __future__ import annotations

import threading

from semel.storage.fs import FaultyFileSystem


class HeldFsyncs(FaultyFileSystem):
    """Once ``hold`` is set, fsyncs of files whose path contains it wait for ``release``
    (in the flusher's thread), as a disk that has not answered yet."""

    def __init__(self) -> None:
        super().__init__()
        self.hold: str | None = None
        self.held = threading.Event()
        self.release = threading.Event()

    def _fsync(self, handle) -> None:
        if self.hold is not None and self.hold in handle.path:
            self.held.set()
            self.release.wait()
        super()._fsync(handle)
