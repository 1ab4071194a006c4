"""RocketMQ 4.9.8's HA wire protocol (FACTS §8, FACTS-wave2 §1; store:ha/HAConnection.java),
sans-IO: raw TCP on ``listenPort + 1``, no remoting frames.

    slave -> master   8-byte big-endian i64: the slave's CommitLog max offset (a request, then acks)
    master -> slave   [i64 start offset][i32 size] + size bytes of raw CommitLog; size 0: heartbeat

A master reads whole multiples of 8 and takes the last complete value; it sends at most
``TRANSFER_BATCH`` bytes a chunk, never across a CommitLog file's end.
"""
from __future__ import annotations

import struct

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
TRANSFER_BATCH = 32 * 1024          # haTransferBatchSize
HEARTBEAT_S = 5.0                   # haSendHeartbeatInterval
HOUSEKEEPING_S = 20.0               # haHousekeepingInterval: a peer silent this long is closed


class Reports:
    """The slave's offset reports out of the bytes read, as 4.9.8's master reads them."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> int | None:
        """The last complete report in what came so far (None when none completed)."""
        self.buf += data
        whole = len(self.buf) - len(self.buf) % REPORT.size
        if not whole:
            return None
        value: int = REPORT.unpack_from(self.buf, whole - REPORT.size)[0]
        del self.buf[:whole]
        return value


def chunk(start: int, data) -> list:
    """A master's frame: the header, then the CommitLog bytes from ``start`` (a bytes-like)."""
    return [HEADER.pack(start, len(data)), data]
