"""A master's replicator: RocketMQ 4.9.8's HA service (``replicator/protocol.py``) on
``listenPort + 1``. It owns the replication state: each slave connection, and ``slave_acked`` in
the control block, the highest offset any connected slave has reported (what SYNC_MASTER sends
wait for).

Per slave, as 4.9.8's HAConnection: its first report says where it is. 0 (an empty slave) starts
at the oldest CommitLog byte the master still holds (4.9.8: the start of its last file, so an
empty 4.x slave never gets the older files); another value starts there. Then chunks of at most
32 KiB, never across a file's end, of what is written (``written``; not necessarily flushed, as
4.9.8), as soon as it is written (the writer's passes are followed every few ms); a heartbeat
when nothing was sent for 5 s (``haSendHeartbeatInterval``); the connection is closed after 20 s
without a report (``haHousekeepingInterval``), or at a report past the master's end (a slave
ahead of its master).
"""
from __future__ import annotations

import asyncio
import bisect
import collections
import logging
import time

import numpy as np

from rocketbox.net.role import ServerRole
from rocketbox.replicator import protocol as HA
from rocketbox.shm.layout import C, S
from rocketbox.store.view import StoreView

log = logging.getLogger("rocketbox.replicator")
FOLLOW_S = 0.002                    # how often a caught-up connection looks at ``written`` again
SEND_AHEAD = 1 << 20                # a slave behind is sent this much in one write (each chunk still at most
                                    # haTransferBatchSize: a 4.9.8 slave reads into a 4 MiB buffer)
LAG_SAMPLES, LAG_WINDOW_S = 100_000, 600.0   # the CommitLog's growth kept for lags in ms: this many, this long


class MasterService(ServerRole):
    def __init__(self, cfg, shared):
        super().__init__()
        self.cfg, self.sh, self.ctl = cfg, shared, shared.control
        self.heartbeat_s, self.housekeeping_s = cfg.haSendHeartbeatInterval / 1000, cfg.haHousekeepingInterval / 1000
        self.acked: dict[int, int] = {}             # connection id -> its slave's last report
        self.samples: collections.deque = collections.deque()   # (CommitLog end, monotonic s) as it grew
        self.view: StoreView | None = None

    def open(self) -> "MasterService":
        self.view = StoreView(self.cfg, self.sh, name="replicator").open()
        self.ctl[C.SLAVE_ACKED] = self.ctl[C.SLAVE_COUNT] = self.ctl[C.SLAVE_LAG_BYTES] = self.ctl[C.SLAVE_LAG_MS] = 0
        return self

    def close(self) -> None:
        if self.view is not None:
            self.view.close()
            self.view = None

    async def serve(self) -> None:
        port = self.cfg.listenPort + 1
        server = await asyncio.start_server(self._slave, "0.0.0.0", port, reuse_address=True)
        log.info("replicator: HA service listening on port %d", port)
        try:
            while not self.stop_requested:
                await self.sleep(1.0)
                self._publish_lag()
        finally:
            server.close()
            await server.wait_closed()

    async def _slave(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer, key = writer.get_extra_info("peername"), id(writer)
        reports, first = HA.Reports(), asyncio.get_running_loop().create_future()
        reading = asyncio.ensure_future(self._read(reader, reports, key, first, peer))
        try:
            await asyncio.wait({first, reading}, timeout=self.housekeeping_s, return_when=asyncio.FIRST_COMPLETED)
            if not first.done():                 # closed, or silent, before its first report (a port probe)
                return
            start = first.result()
            end = int(self.ctl[C.WRITTEN])
            at = int(self.ctl[C.MIN_PHYS]) if start == 0 else start
            if start > end:
                log.warning("replicator: slave %s is ahead of this master (%d > %d): closed", peer, start, end)
                return
            log.info("replicator: slave %s connected at offset %d; sending from %d", peer, start, at)
            await self._send(writer, at, reading)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            log.info("replicator: slave %s gone: %s", peer, e or type(e).__name__)
        except asyncio.CancelledError:           # the role stops
            pass
        finally:
            reading.cancel()
            reading.add_done_callback(lambda t: t.cancelled() or t.exception())   # (how it ended is said above)
            self.acked.pop(key, None)
            self._publish()
            writer.close()

    async def _read(self, reader, reports: HA.Reports, key: int, first: asyncio.Future, peer) -> None:
        """The slave's reports: the first says where to start, each later one is its ack."""
        while True:
            data = await asyncio.wait_for(reader.read(1 << 20), self.housekeeping_s)
            if not data:
                raise ConnectionResetError("closed by the slave")
            value = reports.feed(data)
            if value is None:
                continue
            if not first.done():
                first.set_result(value)
            elif value > int(self.ctl[C.WRITTEN]):
                raise ConnectionResetError(f"slave {peer} acked {value}, past this master's end")
            self.acked[key] = value
            self._publish()

    def _sample(self, end: int) -> None:
        """When the CommitLog reached ``end`` (for the lag in ms), sampled as connections follow it."""
        samples = self.samples
        if not samples or end > samples[-1][0]:
            now = time.monotonic()
            samples.append((end, now))
            while len(samples) > LAG_SAMPLES or now - samples[0][1] > LAG_WINDOW_S:
                samples.popleft()

    def lag(self, acked: int) -> tuple[int, int]:
        """(bytes, ms) a slave that has ``acked`` is behind: what it lacks, and how long ago the
        first byte of that was written (as sampled; the window's age at most)."""
        end = int(self.ctl[C.WRITTEN])
        if acked >= end:
            return 0, 0
        i = bisect.bisect_right(self.samples, acked, key=lambda s: s[0])
        since = self.samples[i][1] if i < len(self.samples) else time.monotonic()
        return end - acked, int((time.monotonic() - since) * 1000)

    def _publish_lag(self) -> None:
        """The lag of the slave furthest behind (every second: its ms grow while it is silent)."""
        self.ctl[C.SLAVE_LAG_BYTES], self.ctl[C.SLAVE_LAG_MS] = self.lag(min(self.acked.values())) if self.acked else (0, 0)

    def _publish(self) -> None:
        """The highest offset a slave has and how many report, then the readers whose SYNC_MASTER
        sends wait for no more than that are posted."""
        acked = max(self.acked.values(), default=0)
        self.ctl[C.SLAVE_ACKED] = acked
        self.ctl[C.SLAVE_COUNT] = len(self.acked)
        waits = self.sh.slots[:, S.REPLICA_WAIT]
        for i in np.flatnonzero((waits > 0) & (waits <= acked)).tolist():
            self.sh.slot_wakers[i].post()

    async def _send(self, writer: asyncio.StreamWriter, at: int, reading: asyncio.Future) -> None:
        loop, fsize = asyncio.get_running_loop(), self.cfg.mappedFileSizeCommitLog
        last_sent = loop.time()
        assert self.view is not None
        while not self.stop_requested and not reading.done():
            end = int(self.ctl[C.WRITTEN])
            self._sample(end)
            if at < end:
                parts: list = []
                ahead = min(end, at + SEND_AHEAD)        # chunks of haTransferBatchSize, written together
                while at < ahead:
                    n = min(ahead, at - at % fsize + fsize, at + self.cfg.haTransferBatchSize) - at
                    try:
                        parts += HA.chunk(at, self.view.span(at, at + n).tobytes())
                    except ValueError as e:              # (its file deleted by retention meanwhile)
                        raise ConnectionResetError(str(e)) from None
                    at += n
                writer.writelines(parts)
                await writer.drain()
                last_sent = loop.time()
                continue
            if loop.time() - last_sent >= self.heartbeat_s:
                writer.writelines(HA.chunk(at, b""))
                await writer.drain()
                last_sent = loop.time()
            await asyncio.sleep(FOLLOW_S)
        if reading.done() and reading.exception() is not None:
            raise reading.exception()   # type: ignore[misc]
