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
without a report (``haHousekeepingInterval``), or at an ack past the master's end.

Beyond 4.9.8: a slave whose first report is past what this start of the master shares with it
(past ``boot_written`` and past anything this start sent: the master lost its tail) is asked to
cut back to ``boot_written`` (``_cut``) instead of being left stuck; its reports count as acks
only once it streams.
"""
from __future__ import annotations

import asyncio
import bisect
import collections
import json
import logging
import os
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
        self.peers: dict[int, str] = {}             # connection id -> its slave's address
        self.listed: list | None = None             # the slaves as last written to ``slaves_path``
        self.samples: collections.deque = collections.deque()   # (CommitLog end, monotonic s) as it grew
        self.view: StoreView | None = None
        self.said_cut: set = set()                  # (slave host, its report) asked to cut, said once

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
        link = _Link()
        reading = asyncio.ensure_future(self._read(reader, link, key, peer))
        try:
            await link.report_or_end(reading, self.housekeeping_s)
            if link.latest is None:              # closed, or silent, before its first report (a port probe)
                return
            start = link.latest
            if start > max(int(self.ctl[C.BOOT_WRITTEN]), int(self.ctl[C.HA_SENT])):
                start = await self._cut(writer, link, reading, peer)
            link.streaming = True
            self.acked[key] = start
            self.peers[key] = f"{peer[0]}:{peer[1]}" if peer else "?"
            self._publish()
            at = int(self.ctl[C.MIN_PHYS]) if start == 0 else start
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
            self.peers.pop(key, None)
            self._publish()
            writer.close()

    async def _cut(self, writer: asyncio.StreamWriter, link: "_Link", reading: asyncio.Future, peer) -> int:
        """A slave ahead of what this master's start shares with it: it holds bytes past
        ``boot_written`` that no connection of this start sent (this master lost its tail; its
        end may have grown since, with other records).  It is asked to cut back to
        ``boot_written`` with a heartbeat header at that offset, every heartbeat interval, until
        it reports no further (a rocketbox slave cuts, keeping what it cut; a 4.9.8 slave closes
        the connection, as against a 4.9.8 master).  -> its report."""
        to = int(self.ctl[C.BOOT_WRITTEN])
        said = (peer[0] if peer else None, link.latest)
        if said not in self.said_cut:
            self.said_cut.add(said)
            log.warning("replicator: slave %s reports offset %d, past this master's end when it started (%d): this "
                        "master lost its tail (or is not its master); asking the slave to cut back to %d",
                        peer, link.latest, to, to)
        while True:
            link.changed.clear()
            writer.writelines(HA.chunk(to, b""))
            await writer.drain()
            await link.report_or_end(reading, self.heartbeat_s)
            if reading.done():
                raise reading.exception() or ConnectionResetError("closed by the slave")
            assert link.latest is not None
            if link.latest <= to:
                return link.latest

    async def _read(self, reader, link: "_Link", key: int, peer) -> None:
        """The slave's reports: the first says where it is, each later one is its ack (counted
        once it streams: what a slave ahead of this master reports is no ack)."""
        reports = HA.Reports()
        while True:
            data = await asyncio.wait_for(reader.read(1 << 20), self.housekeeping_s)
            if not data:
                raise ConnectionResetError("closed by the slave")
            value = reports.feed(data)
            if value is None:
                continue
            link.latest = value
            link.changed.set()
            if link.streaming:
                if value > int(self.ctl[C.WRITTEN]):
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
        """The lag of the slave furthest behind (every second: its ms grow while it is silent), and
        each slave's, for the metrics role: ``slaves_path``, a JSON list of {"slave", "acked",
        "lag_bytes", "lag_ms"} replaced whole when it changed."""
        self.ctl[C.SLAVE_LAG_BYTES], self.ctl[C.SLAVE_LAG_MS] = self.lag(min(self.acked.values())) if self.acked else (0, 0)
        listed = sorted(({"slave": self.peers.get(k, "?"), "acked": a, **dict(zip(("lag_bytes", "lag_ms"), self.lag(a)))}
                         for k, a in self.acked.items()), key=lambda d: str(d["slave"]))
        if listed != self.listed:
            path = self.sh.slaves_path
            try:
                with open(path + ".tmp", "w") as f:
                    json.dump(listed, f)
                os.replace(path + ".tmp", path)
                self.listed = listed
            except OSError as e:
                log.warning("replicator: writing the slaves' lags to %s failed: %s", path, e)

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
                if at > self.ctl[C.HA_SENT]:
                    self.ctl[C.HA_SENT] = at
                last_sent = loop.time()
                continue
            if loop.time() - last_sent >= self.heartbeat_s:
                writer.writelines(HA.chunk(at, b""))
                await writer.drain()
                last_sent = loop.time()
            await asyncio.sleep(FOLLOW_S)
        if reading.done() and reading.exception() is not None:
            raise reading.exception()   # type: ignore[misc]


class _Link:
    """One slave connection's reports, as its reading task takes them."""

    def __init__(self) -> None:
        self.latest: int | None = None          # its last report (None before the first)
        self.changed = asyncio.Event()          # set at each report
        self.streaming = False                  # it shares this master's history: its reports are acks

    async def report_or_end(self, reading: asyncio.Future, timeout_s: float) -> None:
        """Until its next report, the end of its reading task, or ``timeout_s``."""
        waiter = asyncio.ensure_future(self.changed.wait())
        try:
            await asyncio.wait({waiter, reading}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
