"""A slave's replicator: RocketMQ 4.9.8's HA client (``replicator/protocol.py``), and the copy of
the master's metadata (``replicator/synchronize.py``).

The slave's writer stays the CommitLog's only writer (docs/decisions: the slave's writer appends
the master's bytes): this process connects to the master's HA service, checks what arrives
(each chunk starts where the slave's CommitLog ends, and holds records: ``HA.Records``) and hands
each chunk to the writer as a REPLICA ring entry, pipelined; once the writer has it, the new end
is reported to the master.  The slave's dispatcher builds the consume queues and the index from
the CommitLog as the master's does.

Where the master is: ``haMasterAddress`` when set, else what the name servers answered reader
0's registration (``shm/registered.py``).  Beyond 4.9.8's client: the first report goes
at once (4.9.8 waits 5 s), and a lost connection is tried again after 1 s (4.9.8: 5 s).  The
connection is dropped, and tried again, when the master sends a chunk for another offset, sends
what is not records, is silent for 20 s, or when the slave's writer restarts (entries it took
may be unanswered: the next connection starts from what it committed).
"""
from __future__ import annotations

import asyncio
import logging
import struct
import time

from rocketbox.net.client import split_addr
from rocketbox.net.role import ServerRole
from rocketbox.replicator import protocol as HA
from rocketbox.replicator.synchronize import FIRST_S, PERIOD_S, Synchronizer
from rocketbox.shm import protocol as P
from rocketbox.shm import registered
from rocketbox.shm.layout import C
from rocketbox.shm.ringclient import RingClient
from rocketbox.store import message
from rocketbox.store.view import StoreView

log = logging.getLogger("rocketbox.replicator")
RECONNECT_S = 1.0
CONNECT_TIMEOUT_S = 3.0
RING_FULL_S = 0.002          # a full request ring is tried again this often
ENTRY_BYTES = 1 << 20        # its whole chunks go to the writer in REPLICA entries of at most this (and
                             # half the request ring)
_PHYS = struct.Struct(">q")


class Dropped(Exception):
    """The connection to the master ends (said in the log once), and is tried again."""


class SlaveService(ServerRole):
    def __init__(self, cfg, shared):
        super().__init__()
        self.cfg, self.sh, self.ctl = cfg, shared, shared.control
        self.heartbeat_s, self.housekeeping_s = cfg.haSendHeartbeatInterval / 1000, cfg.haHousekeepingInterval / 1000
        self.ring: RingClient | None = None
        self.view: StoreView | None = None
        self.entry_max = ENTRY_BYTES
        self.said: str | bool | None = None    # the last reason logged for not replicating (said once);
                                               # False while replicating
        self.reported = 0                      # the last offset reported to the master
        self.written = 0                       # the CommitLog end the writer last answered
        self.failed: str | None = None         # why the writer refused a chunk (ends the connection)
        self.conn: asyncio.WriteTransport | None = None   # to the master, while connected
        self.cut_rid = -1                      # the request id of the last CUT entry

    def open(self) -> "SlaveService":
        self.ring = RingClient(self.cfg, self.sh).open()
        self.entry_max = min(ENTRY_BYTES, self.ring.requests.max_entry - 4096)     # a REPLICA entry's bytes
        self.view = StoreView(self.cfg, self.sh, name="replicator").open()
        self.ctl[C.SLAVE_ACKED] = self.ctl[C.SLAVE_COUNT] = 0
        return self

    def close(self) -> None:
        if self.ring is not None:
            self.ring.close()
            self.ring = None
        if self.view is not None:
            self.view.close()
            self.view = None

    async def serve(self) -> None:
        assert self.ring is not None
        self.loop.add_reader(self.ring.waker.fileno(), self._on_wake)
        sync = asyncio.ensure_future(self._synchronize())
        try:
            while not self.stop_requested:
                addr = self.master_ha()
                if addr is None:
                    self._say("no master HA address yet (haMasterAddress is empty and no name server has "
                              "answered this slave's registration with one)")
                else:
                    try:
                        await self._session(addr)
                    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, Dropped, ValueError) as e:
                        self._say(f"replication from master {addr} stopped: {type(e).__name__}: {e}")   # (BadStream too)
                await self.sleep(RECONNECT_S)
        finally:
            sync.cancel()
            self.loop.remove_reader(self.ring.waker.fileno())

    async def _synchronize(self) -> None:
        assert self.ring is not None
        sync = Synchronizer(self.cfg, self.sh, self.ring)
        try:
            await self.sleep(FIRST_S)
            while not self.stop_requested:
                await sync.once()
                await self.sleep(PERIOD_S)
        finally:
            sync.close()

    def master_ha(self) -> str | None:
        if len(self.cfg.haMasterAddress) >= 6:          # 4.9.8: a configured address pins it
            return self.cfg.haMasterAddress
        return registered.read(self.cfg.run_dir).get("haServerAddr") or None

    def _say(self, why: str) -> None:
        if why != self.said:
            log.warning("replicator: %s", why)
            self.said = why

    # ------------------------------------------------------------ one connection
    async def _session(self, addr: str) -> None:
        await self._settled()
        host, port = split_addr(addr)
        inbox = HA.Inbox(self.cfg.mappedFileSizeCommitLog)
        transport, rx = await asyncio.wait_for(
            asyncio.get_running_loop().create_connection(lambda: _Receiver(inbox), host, port), CONNECT_TIMEOUT_S)
        try:
            epoch = int(self.ctl[C.WRITER_EPOCH])
            self.written = end = int(self.ctl[C.WRITTEN])
            records = self._records_to(end)
            self.failed, self.conn = None, transport
            self._report(end, force=True)                       # at once: where to start
            last_report = time.monotonic()
            fsize = self.cfg.mappedFileSizeCommitLog
            while not self.stop_requested:
                if rx.ended is None:
                    await asyncio.wait_for(rx.arrived.wait(), self.housekeeping_s)
                rx.arrived.clear()
                frames = inbox.frames()
                if not frames and rx.ended is not None:
                    raise Dropped(rx.ended)
                if int(self.ctl[C.WRITER_EPOCH]) != epoch:
                    raise Dropped("the slave's writer restarted")
                if self.failed:
                    raise Dropped(self.failed)
                start, run, size = end, list[memoryview](), 0   # what arrived, in entries of the writer
                for offset, chunk in frames:
                    if offset < end and not chunk:             # the master ends before this slave (it lost
                        if run:                                 # its tail): a rocketbox master says so this way
                            await self._push(start, run)
                            run, size = [], 0
                        await self._cut(addr, offset, end)
                        start = end = offset
                        records = HA.Records(offset, fsize)
                        continue
                    if offset != end:
                        if end or run or offset % fsize or int(self.ctl[C.MIN_PHYS]):
                            raise Dropped(f"master pushed offset {offset}, not this slave's end {end}")
                        start = end = offset                    # an empty slave, given the master's last file
                        records = HA.Records(offset, fsize)    # only (4.9.8's master)
                    if chunk:
                        records.feed(offset, chunk)
                        if run and size + len(chunk) > self.entry_max:
                            await self._push(start, run)
                            start, run, size = end, [], 0
                        run.append(chunk)
                        size += len(chunk)
                        end += len(chunk)
                if run:
                    await self._push(start, run)
                    if self.said is not False:                  # the first bytes of this connection
                        log.info("replicator: replicating from master %s, from offset %d", addr, start)
                        self.said = False                       # (the next failure is said again)
                del run, frames                                 # (views into the inbox)
                inbox.consumed()
                rx.resume()
                if time.monotonic() - last_report >= self.heartbeat_s:
                    self._report(self.written, force=True)
                    last_report = time.monotonic()
        finally:
            self.conn = None
            transport.close()

    async def _cut(self, addr: str, to: int, end: int) -> None:
        """Cut this slave's CommitLog back to ``to``, its master's end (the master lost its tail),
        and report it; what is cut is kept in the quarantine (``WriterService._cut``).  Refused
        (Dropped: said once, tried again at the next connection) when it does not look like a
        lost tail: see ``_cut_refused``."""
        assert self.ring is not None
        await self._settled()
        why = self._cut_refused(to, end)
        if why:
            raise Dropped(f"master {addr} ends at {to}, before this slave's end {end}, and this slave does not cut "
                          f"back to it: {why}")
        while (rid := self.ring.try_push_replica(to, [], P.CUT)) is None:
            self._on_wake()
            await asyncio.sleep(RING_FULL_S)
        self.cut_rid = rid
        await self._settled()
        if self.failed:
            raise Dropped(self.failed)
        log.warning("replicator: master %s ends at %d, before this slave's end %d (it lost its tail): this slave's "
                    "CommitLog was cut back to it; the %d bytes cut are in the quarantine", addr, to, end, end - to)
        self._report(to, force=True)

    def _cut_refused(self, to: int, end: int) -> str | None:
        """Why a cut back to ``to`` is not taken, or None: a master that is empty or holds
        less than this slave's first byte (a new or wiped master, or another group's), a cut of
        more than a CommitLog file, or ``to`` where no record of this slave's starts (their
        histories differ there): the operator decides those (wipe this slave's store)."""
        assert self.view is not None
        fsize, first = self.cfg.mappedFileSizeCommitLog, int(self.ctl[C.MIN_PHYS])
        if to <= 0:
            return "the master is empty (a new or wiped master?); wipe this slave's store to copy it"
        if to < first:
            return f"the master ends before this slave's first byte ({first}); wipe this slave's store to copy it"
        if end - to > fsize:
            return f"that would cut {end - to} bytes, more than a CommitLog file ({fsize})"
        at = to % fsize
        if at == 0 or end - to < message.PREFIX.size:         # a file's start; a record not all here yet
            return None
        head = self.view.span(to, to + min(message.PREFIX.size, fsize - at)).tobytes()
        total, magic = message.HEAD.unpack_from(head)
        if magic == message.BLANK_MAGIC and total == fsize - at:
            return None
        if magic == message.MAGIC and len(head) == message.PREFIX.size \
                and _PHYS.unpack_from(head, message.PHYS_OFFSET_AT)[0] == to:
            return None
        return f"no record of this slave's starts at {to}: its history and the master's differ"

    async def _settled(self) -> None:
        """Until the writer has answered every chunk of the last connection (or a new writer
        started): a connection starts from the CommitLog's end, which they would move."""
        assert self.ring is not None
        while self.ring.awaiting and not self.stop_requested:
            self._on_wake()
            self.ring.check_writer()
            await asyncio.sleep(RING_FULL_S)

    def _records_to(self, end: int) -> HA.Records:
        """Where records start from the CommitLog's end on: what lies between the last record
        dispatched and the end (a record not all here yet, or ones not dispatched yet) is read."""
        assert self.view is not None
        start = min(int(self.ctl[C.DISPATCHED]), end)
        records = HA.Records(start, self.cfg.mappedFileSizeCommitLog)
        at = start
        while at < end:
            n = min(end - at, 1 << 20, self.cfg.mappedFileSizeCommitLog - at % self.cfg.mappedFileSizeCommitLog)
            records.feed(at, self.view.span(at, at + n).tobytes())
            at += n
        return records

    async def _push(self, offset: int, parts: list) -> None:
        """Chunks to the writer as one entry (they follow each other from ``offset``), as soon as
        its ring has room."""
        assert self.ring is not None
        while self.ring.try_push_replica(offset, parts) is None:
            self._on_wake()
            await asyncio.sleep(RING_FULL_S)

    def _on_wake(self) -> None:
        """The writer's answers: report the new end to the master."""
        assert self.ring is not None
        self.ring.waker.drain()
        self.ring.poll()
        for rid, status, written in self.ring.replicas:
            if rid == self.cut_rid and status == P.SUCCESS:
                self.written = written                  # (back: the cut)
            elif status == P.SUCCESS:
                self.written = max(self.written, written)
            elif self.failed is None:
                self.failed = (f"the writer refused a chunk (status {status}; the CommitLog ends at {written})"
                               if status != P.SERVICE_NOT_AVAILABLE else "no room on disk for the master's bytes")
        self.ring.replicas.clear()
        for rid in [rid for rid, reply in self.ring.topic_replies.items() if reply is not None]:
            del self.ring.topic_replies[rid]       # (the metadata copy's topics: it does not wait for them)
        self._report(self.written)

    def _report(self, offset: int, force: bool = False) -> None:
        """The slave's end to the master, if it moved (or ``force``), while the connection is open
        (the writer's answer may come after the master closed it, before the session has ended)."""
        if self.conn is not None and not self.conn.is_closing() and (force or offset > self.reported):
            self.conn.write(HA.REPORT.pack(offset))
            self.reported = offset


class _Receiver(asyncio.BufferedProtocol):
    """The connection's bytes, received straight into an ``HA.Inbox``; reading pauses while it
    is full (``resume`` once it was consumed)."""

    def __init__(self, inbox: HA.Inbox):
        self.inbox = inbox
        self.transport: asyncio.Transport = None  # type: ignore[assignment]   # (set once connected)
        self.arrived = asyncio.Event()
        self.ended: str | None = None          # why no more bytes come
        self.paused = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.inbox.space()

    def buffer_updated(self, nbytes: int) -> None:
        self.inbox.received(nbytes)
        self.arrived.set()
        if not len(self.inbox.space()):
            self.transport.pause_reading()
            self.paused = True

    def eof_received(self) -> bool:
        self.ended = "closed by the master"
        self.arrived.set()
        return False

    def connection_lost(self, exc) -> None:
        if self.ended is None:
            self.ended = f"connection lost: {exc}" if exc else "closed by the master"
        self.arrived.set()

    def resume(self) -> None:
        if self.paused and len(self.inbox.space()):
            self.paused = False
            self.transport.resume_reading()
