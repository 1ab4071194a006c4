"""Pulls held until their queue grows (long polling), kept by queue.

RocketMQ's ``PullRequestHoldService`` keeps held pulls per topic@queueId and looks at one queue's
holds when a message arrives on it.  Here a wake (the dispatcher's post, the reader's tick) looks
at every held queue at once: ``want[s]`` is the lowest offset a pull held on queue slot ``s``
waits past (int64 max where none is held), so the queues that grew are one vector comparison with
the shared max-offset column, whatever the number of holds.  Holding, answering or timing out a
pull touches only its own queue's list.  A queue that has no slot yet (nothing was ever
dispatched to it) is held by name and placed once the shared queue table grows.  While any pull
is held, the slot's ``DISPATCH_WAIT`` asks the dispatcher to post the slot's waker after each pass.
"""
from __future__ import annotations

import logging

import numpy as np

from shm.layout import C, S
from shm.tables import QueueIndex

log = logging.getLogger("rocketbox.reader")
NONE_WANTED = np.iinfo(np.int64).max


class Hold:
    __slots__ = ("key", "offset", "callback", "timer")

    def __init__(self, key, offset: int, callback):
        self.key, self.offset, self.callback, self.timer = key, offset, callback, None


class HeldPulls:
    def __init__(self, queues: QueueIndex, loop, slot_row: np.ndarray):
        self.queues, self.loop, self.slot_row = queues, loop, slot_row
        self.max_offsets = queues.max_offsets
        self.want = np.full(len(self.max_offsets), NONE_WANTED, dtype=np.int64)
        self.by_slot: dict[int, list[Hold]] = {}
        self.unplaced: dict[tuple[str, int], list[Hold]] = {}   # queues with no slot yet, by (topic, id)
        self.placed_at = -1                                      # QUEUE_COUNT when they were last looked up
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def hold(self, topic: str, queue_id: int, offset: int, timeout_s: float, callback) -> None:
        """``callback(True)`` once the queue's published max offset passes ``offset`` (at once if
        it already has), ``callback(False)`` after ``timeout_s``."""
        self.slot_row[S.DISPATCH_WAIT] = 1      # first: what is dispatched from now on wakes us
        s = self.queues.slot(topic, queue_id)
        if s is not None and int(self.max_offsets[s]) > offset:     # it grew since the pull looked
            self._counted(0)
            _call(callback, True)
            return
        h = Hold(s if s is not None else (topic, queue_id), offset, callback)
        h.timer = self.loop.call_later(timeout_s, self._timed_out, h)
        if s is None:
            self.unplaced.setdefault(h.key, []).append(h)
        else:
            self.by_slot.setdefault(s, []).append(h)
            if offset < self.want[s]:
                self.want[s] = offset
        self._counted(1)

    def settle(self) -> None:
        """End every hold whose queue has grown past its offset."""
        if self.unplaced and int(self.queues.control[C.QUEUE_COUNT]) != self.placed_at:
            self._place()
        if not self.by_slot:
            return
        for s in np.flatnonzero(self.max_offsets > self.want).tolist():
            self._end_grown(s, int(self.max_offsets[s]))

    def _place(self) -> None:
        self.placed_at = int(self.queues.control[C.QUEUE_COUNT])
        for key in list(self.unplaced):
            s = self.queues.slot(*key)
            if s is None:
                continue
            holds = self.unplaced.pop(key)
            for h in holds:
                h.key = s
            self.by_slot.setdefault(s, []).extend(holds)
            self.want[s] = min(h.offset for h in self.by_slot[s])

    def _end_grown(self, s: int, max_offset: int) -> None:
        held = self.by_slot.pop(s)
        ended = [h for h in held if h.offset < max_offset]
        kept = [h for h in held if h.offset >= max_offset]
        self._keep(s, kept)
        self._counted(-len(ended))
        for h in ended:
            h.timer.cancel()
            _call(h.callback, True)

    def _timed_out(self, h: Hold) -> None:
        table = self.unplaced if type(h.key) is tuple else self.by_slot
        held = table.pop(h.key)
        kept = [o for o in held if o is not h]
        if table is self.by_slot:
            self._keep(h.key, kept)
        elif kept:
            table[h.key] = kept
        self._counted(-1)
        _call(h.callback, False)

    def _counted(self, change: int) -> None:
        self.count += change
        self.slot_row[S.DISPATCH_WAIT] = 1 if self.count else 0

    def _keep(self, s: int, kept: list[Hold]) -> None:
        if kept:
            self.by_slot[s] = kept
            self.want[s] = min(h.offset for h in kept)
        else:
            self.want[s] = NONE_WANTED


def _call(callback, grew: bool) -> None:
    try:
        callback(grew)
    except Exception:       # one broken callback must not cost the other pulls their answers
        log.exception("long-poll callback failed")
