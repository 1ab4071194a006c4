"""StoreCheckpoint: the ``checkpoint`` file, 4096 bytes (FACTS §5.4).

    off size field                 written by (rocketbox)
    0   8    physicMsgTimestamp    flusher: store time of the last flushed CommitLog message
    8   8    logicsMsgTimestamp    flusher: store time of the last message whose CQ entry is flushed
    16  8    indexMsgTimestamp     flusher: store time covered by flushed index files

Recovery uses ``min_timestamp`` = min(physic, logics) - 3 s to choose where an abnormal
recovery starts.  Only the flusher writes it while the appliance runs; recovery reads it.
"""
from __future__ import annotations

import os
import struct

FILE_SIZE = 4096
FIELDS = struct.Struct(">qqq")


class Checkpoint:
    def __init__(self, path: str):
        self.path = path
        self.physic_ts = self.logics_ts = self.index_ts = 0

    def load(self) -> "Checkpoint":
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                data = f.read(FIELDS.size)
            if len(data) == FIELDS.size:
                self.physic_ts, self.logics_ts, self.index_ts = FIELDS.unpack(data)
        return self

    @property
    def min_timestamp(self) -> int:
        m = min(self.physic_ts, self.logics_ts) - 3000
        return max(m, 0)

    @property
    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp, self.index_ts)

    def save(self) -> None:
        """Write all three fields in place and fdatasync; OSError is fatal to the caller."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != FILE_SIZE:
                os.ftruncate(fd, FILE_SIZE)
            os.pwrite(fd, FIELDS.pack(self.physic_ts, self.logics_ts, self.index_ts), 0)
            os.fdatasync(fd)
        finally:
            os.close(fd)
