"""The appliance's shared state: one ``state`` segment, one ``rings`` segment, the wakers, the
orderly consumers' queue-lock directory, a file per group (``readers.locks``), and the readers'
client details, a file per reader (``readers.roster``).

The supervisor ``create``s and finally ``unlink``s; every role ``attach``es and ``close``s.
Sizes come from the config so every process computes the same layout.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass

from rocketbox.shm import layout
from rocketbox.shm.ring import Ring, ring_size
from rocketbox.shm.segment import Segment
from rocketbox.shm.wake import PipeWaker, Waker


@dataclass(frozen=True)
class Geometry:
    prefix: str            # e.g. "/rbx-10911": every shm and semaphore name starts with it
    max_slots: int         # producer ring pairs (readers, tools, benchmarks)
    request_bytes: int     # each request ring's data capacity
    response_bytes: int    # each response ring's data capacity
    queue_slots: int
    topic_slots: int
    offset_slots: int
    client_rows: int       # consumer-group members each slot's owner (a reader) can hold


class SharedState:
    def __init__(self, g: Geometry):
        self.g = g
        self.state = Segment(g.prefix + ".state", layout.state_size(g.max_slots, g.queue_slots, g.topic_slots,
                                                                    g.offset_slots, g.client_rows))
        self.rings_seg = Segment(g.prefix + ".rings", g.max_slots * (ring_size(g.request_bytes) + ring_size(g.response_bytes)))
        self.writer_waker = Waker(g.prefix + ".wake.writer")
        self.dispatcher_waker = Waker(g.prefix + ".wake.dispatcher")
        self.flusher_waker = Waker(g.prefix + ".wake.flusher")
        self.slot_wakers = [PipeWaker(f"{g.prefix}.wake.slot{i}") for i in range(g.max_slots)]
        self.locks_dir = "/dev/shm/" + g.prefix.lstrip("/") + ".locks"    # orderly consumers' queue locks, a file per group
        self.roster_dir = "/dev/shm/" + g.prefix.lstrip("/") + ".roster"  # readers' client details, a file per reader
        self.slaves_path = "/dev/shm/" + g.prefix.lstrip("/") + ".slaves.json"   # a master's slaves (replicator/master.py)
        self.views: dict = {}

    def _all_wakers(self):
        return [self.writer_waker, self.dispatcher_waker, self.flusher_waker, *self.slot_wakers]

    def create(self) -> "SharedState":
        self.state.create()
        self.rings_seg.create()
        for w in self._all_wakers():
            w.create()
        self.remove_dirs()                           # an earlier run's locks and clients: gone, as a broker restart's
        self._carve()
        self.control[layout.C.MAGIC] = layout.LAYOUT_MAGIC
        return self

    def attach(self) -> "SharedState":
        try:
            self.state.attach()
            self.rings_seg.attach()
            for w in self._all_wakers():
                w.attach()
        except BaseException:
            self.close()
            raise
        self._carve()
        if self.control[layout.C.MAGIC] != layout.LAYOUT_MAGIC:
            self.close()
            raise RuntimeError(f"shared state {self.g.prefix} is not initialised (is the supervisor running?)")
        return self

    def _carve(self) -> None:
        g = self.g
        self.views = layout.state_views(self.state.buf, g.max_slots, g.queue_slots, g.topic_slots, g.offset_slots,
                                        g.client_rows)
        self.control = self.views["control"]
        self.slots = self.views["slots"]
        self.request_rings, self.response_rings = [], []
        at = 0
        for _ in range(g.max_slots):
            n = ring_size(g.request_bytes)
            self.request_rings.append(Ring(self.rings_seg.buf[at:at + n]))
            at += n
            n = ring_size(g.response_bytes)
            self.response_rings.append(Ring(self.rings_seg.buf[at:at + n]))
            at += n

    def queue_count(self) -> int:
        return int(self.control[layout.C.QUEUE_COUNT])

    def topic_count(self) -> int:
        return int(self.control[layout.C.TOPIC_COUNT])

    def close(self) -> None:
        self.views = {}
        self.control = self.slots = None
        self.request_rings = self.response_rings = []
        self.state.close()
        self.rings_seg.close()
        for w in self._all_wakers():
            w.close()

    def unlink(self) -> None:
        self.state.unlink()
        self.rings_seg.unlink()
        for w in self._all_wakers():
            w.unlink()
        self.remove_dirs()

    def remove_dirs(self) -> None:
        for path in (self.locks_dir, self.roster_dir, self.slaves_path):
            with contextlib.suppress(FileNotFoundError):
                if os.path.isdir(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)                  # (the locks: one file for all groups, before 2026-11-24)
