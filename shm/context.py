"""What every process that serves clients from the store shares: its configuration, the shared
state and tables, its view of the store, its link to the writer, its SYNC_FLUSH and SYNC_MASTER
waits, the consumer groups and its event loop.

A reader's service is one of these, and so is the gRPC front; ``bench.paths`` and the reader tests
open one around the processors they drive.  Opened inside a running loop (the link claims a ring slot and its waker
joins the loop).
"""
from __future__ import annotations

import asyncio

from rocketbox.shm.layout import C, S
from rocketbox.shm.tables import OffsetIndex, TopicIndex
from rocketbox.shm.waits import OffsetWaits
from rocketbox.shm.writerlink import WriterLink
from rocketbox.store.groupconfig import GroupTable
from rocketbox.store.view import StoreView


class ReaderContext:
    def __init__(self, cfg, shared):
        self.cfg, self.sh = cfg, shared
        self.groups = GroupTable(cfg)
        self.sync_flush, self.flush_timeout_s = cfg.sync_flush, cfg.syncFlushTimeout / 1000
        self.sync_master, self.slave_timeout_s = cfg.brokerRole == "SYNC_MASTER", cfg.slaveTimeout / 1000

    def open_context(self) -> "ReaderContext":
        self.loop = asyncio.get_running_loop()
        self.topics = TopicIndex(self.sh.views, self.sh.control)      # the shared tables the writer fills
        self.offsets = OffsetIndex(self.sh.views, self.sh.control)
        self.link = WriterLink(self.cfg, self.sh, self.topics, self.offsets)
        self.slot = self.link.slot                                     # its ring slot, and row of the slot table
        self.view = StoreView(self.cfg, self.sh, self.slot, f"reader-slot{self.slot}").open()
        self.flushes = OffsetWaits(self.sh, self.slot, self.loop, C.FLUSHED, S.FLUSH_WAIT, self.sh.flusher_waker)
        self.replicas = OffsetWaits(self.sh, self.slot, self.loop, C.SLAVE_ACKED, S.REPLICA_WAIT)
        self.loop.add_reader(self.link.waker.fileno(), self._posted)
        return self

    def _posted(self) -> None:
        """The slot's waker was posted: by the writer (replies), the flusher (a waited-for offset
        is on disk), the replicator (a slave has it), the dispatcher (queues grew while pulls are held) or another reader."""
        self.link.waker.drain()
        self.settle()

    def settle(self) -> None:
        """What a post may have completed: the writer's replies, flushes (also on the reader's
        tick: nothing hangs on a lost post)."""
        self.link.on_wake()
        self.flushes.settle()
        self.replicas.settle()

    @property
    def busy(self) -> bool:
        """Sends not answered yet: appends the writer has not answered, or waiting for a flush or a slave."""
        return self.link.busy or bool(self.flushes) or bool(self.replicas)

    def close_context(self) -> None:
        self.loop.remove_reader(self.link.waker.fileno())
        self.view.close()
        self.link.close()

    def slave_unavailable(self, end_offset: int) -> bool:
        """SYNC_MASTER: no slave is connected, or the one furthest on is more than
        ``haSlaveFallbehindMax`` behind ``end_offset``: a send is refused at once, not waited for
        (4.9.8's SLAVE_NOT_AVAILABLE)."""
        ctl = self.sh.control
        return not ctl[C.SLAVE_COUNT] or end_offset - int(ctl[C.SLAVE_ACKED]) >= self.cfg.haSlaveFallbehindMax

    def group(self, name: str) -> dict | None:
        """A consumer group's SubscriptionGroupConfig (``GroupTable.group``)."""
        return self.groups.group(name)

    def group_exists(self, group: str) -> bool:
        """A pull's group must exist unless groups are created on demand (autoCreateSubscriptionGroup)."""
        return self.group(group) is not None
