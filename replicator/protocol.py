"""RocketMQ 4.9.8's HA wire protocol (FACTS §8, FACTS-wave2 §1; store:ha/HAConnection.java),
sans-IO: raw TCP on ``listenPort + 1``, no remoting frames.

    slave -> master   8-byte big-endian i64: the slave's CommitLog max offset (a request, then acks)
    master -> slave   [i64 start offset][i32 size] + size bytes of raw CommitLog; size 0: heartbeat

A master reads whole multiples of 8 and takes the last complete value; it sends at most
``haTransferBatchSize`` bytes a chunk, never across a CommitLog file's end.  A slave reads the
frames where they landed (``Inbox``), and checks that each chunk starts where its CommitLog ends,
and that what arrives are records (``Records``).
"""
from __future__ import annotations

import struct

from rocketbox.store import message, walk

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")


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


class Inbox:
    """The master's frames, read where they were received, as 4.9.8's slave reads them:
    ``[offset][size]`` then ``size`` bytes; BadStream for a size past ``max_size`` (no master
    sends one).  A socket receives into ``space()`` (``recv_into``, or an asyncio BufferedProtocol)
    and says how much with ``received``; ``frames()`` gives the frames completed so far as views
    into the buffer, valid until ``consumed()`` makes room again: no byte is copied on the way
    in (a slave's catch-up, docs/PERFORMANCE.md)."""

    def __init__(self, max_size: int, capacity: int = 8 << 20):
        self.max_size = max_size
        self.buf = bytearray(capacity)
        self.view = memoryview(self.buf)
        self.start = self.end = 0          # bytes received, not consumed: [start, end)
        self.parsed = 0                    # where ``frames()`` stopped: the next frame's header
        self.need = HEADER.size            # the bytes of the frame starting there, as far as known

    def space(self) -> memoryview:
        """Where the next bytes go (empty: the buffer is full until ``consumed``)."""
        return self.view[self.end:]

    def received(self, n: int) -> None:
        self.end += n

    def frames(self) -> list[tuple[int, memoryview]]:
        """The frames completed since the last call: (offset, bytes; empty for a heartbeat)."""
        out, at, head, view = [], self.parsed, HEADER.size, self.view
        self.need = head
        while self.end - at >= head:
            offset, size = HEADER.unpack_from(view, at)
            if not 0 <= size <= self.max_size:
                raise BadStream(f"chunk header of {size} bytes at offset {offset}")
            if self.end - at < head + size:
                self.need = head + size
                break
            out.append((offset, view[at + head:at + head + size]))
            at += head + size
        self.parsed = at
        return out

    def consumed(self) -> None:
        """Every frame ``frames()`` gave is done with: their bytes go.  The frame not all here yet
        moves to the buffer's front when the space after it runs low or cannot hold the rest of it
        (the buffer grows for a frame larger than it)."""
        self.start = self.parsed
        if self.start == self.end:
            self.start = self.end = self.parsed = 0
            return
        size = len(self.buf)
        if self.start + self.need > size or size - self.end < size // 4:
            n = self.end - self.start
            if self.need > size:
                buf = bytearray(2 * self.need)
                buf[:n] = self.view[self.start:self.end]
                self.buf, self.view = buf, memoryview(buf)
            else:
                self.view[:n] = self.view[self.start:self.end]
            self.start, self.end, self.parsed = 0, n, 0


def chunk(start: int, data) -> list:
    """A master's frame: the header, then the CommitLog bytes from ``start`` (a bytes-like)."""
    return [HEADER.pack(start, len(data)), data]


class BadStream(ValueError):
    """What a master sent is not a CommitLog: the connection is dropped, nothing of it written."""


class Records:
    """Where the records of a CommitLog stream start, fed in order as it arrives: each must be a
    record (MAGIC, a size between the smallest record and the end of its file) or a file's BLANK
    filler, so a peer sending garbage is caught before a byte of it is written.  ``next``: the
    offset the next record starts at; ``carry``: the first bytes of a header not all here yet."""

    def __init__(self, start: int, file_size: int):
        self.next, self.file_size, self.carry = start, file_size, b""

    def feed(self, start: int, data) -> None:
        """``data``, the stream's bytes from ``start`` (where the last ended). BadStream if they are
        not records."""
        end = start + len(data)
        if self.next >= end:
            return
        # the carry is the stream's bytes from ``next`` to ``start``
        buf = self.carry + bytes(data) if self.carry else memoryview(data)[self.next - start:]
        at, bad = walk.headers(buf, 0, self.next, self.file_size, message.MIN_RECORD_SIZE)
        if bad >= 0:
            total, magic = message.HEAD.unpack_from(buf, at)
            raise BadStream(f"no record at offset {bad} (size {total}, magic {magic & 0xFFFFFFFF:#x})")
        self.carry = bytes(buf[at:]) if at < len(buf) else b""
        self.next += at
