"""StoreCheckpoint: the ``checkpoint`` file, 4096 bytes (FACTS §5.4).

    off size field                 written by (rocketbox)
    0   8    physicMsgTimestamp    flusher: store time of the last flushed CommitLog message
    8   8    logicsMsgTimestamp    flusher: store time of the last message whose CQ entry is flushed
    16  8    indexMsgTimestamp     flusher: store time covered by flushed index files
    -- rocketbox only (RocketMQ reads the first 24 bytes and ignores the rest of the page) --
    24  8    physicOffset          flusher: CommitLog offset flushed (a record boundary)
    32  8    logicsOffset          flusher: CommitLog offset whose CQ and index entries are all flushed

Recovery starts an abnormal scan at min(physicOffset, logicsOffset): everything before it is on
disk in the CommitLog, the consume queues and the index.  A checkpoint without them (RocketMQ's,
or an older rocketbox's: zeros) falls back to ``min_timestamp`` = min(physic, logics) - 3 s, as
RocketMQ chooses the file an abnormal recovery starts from.  Only the flusher writes it while the appliance runs; recovery reads it.
"""
from __future__ import annotations

import os
import struct

FILE_SIZE = 4096
FIELDS = struct.Struct(">qqq")
OFFSETS = struct.Struct(">qq")          # rocketbox's, after RocketMQ's three fields


class Checkpoint:
    def __init__(self, path: str):
        self.path = path
        self.physic_ts = self.logics_ts = self.index_ts = 0
        self.physic_offset = self.logics_offset = 0

    def load(self) -> "Checkpoint":
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                data = f.read(FIELDS.size + OFFSETS.size)
            if len(data) >= FIELDS.size:
                self.physic_ts, self.logics_ts, self.index_ts = FIELDS.unpack_from(data)
            if len(data) == FIELDS.size + OFFSETS.size:
                self.physic_offset, self.logics_offset = OFFSETS.unpack_from(data, FIELDS.size)
        return self

    @property
    def safe_offset(self) -> int:
        """CommitLog offset before which everything is on disk, derived files too (0: unknown)."""
        return min(self.physic_offset, self.logics_offset)

    @property
    def min_timestamp(self) -> int:
        m = min(self.physic_ts, self.logics_ts) - 3000
        return max(m, 0)

    @property
    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp, self.index_ts)

    def save(self) -> None:
        """Write every field in place and fdatasync; OSError is the caller's (the flusher tries
        again on its next round)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != FILE_SIZE:
                os.ftruncate(fd, FILE_SIZE)
            os.pwrite(fd, FIELDS.pack(self.physic_ts, self.logics_ts, self.index_ts)
                      + OFFSETS.pack(self.physic_offset, self.logics_offset), 0)
            os.fdatasync(fd)
        finally:
            os.close(fd)
