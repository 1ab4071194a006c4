"""Replies that wait for an offset in the control block to pass their end: SYNC_FLUSH's for the
flusher's ``flushed``, SYNC_MASTER's for the replicator's ``slave_acked``.

A queue ordered by end offset (appends are answered in order), one timer for the oldest wait, and
the oldest end offset published in the slot's row (``FLUSH_WAIT``, ``REPLICA_WAIT``) so the
process that moves the offset posts this reader's waker once it has passed it.  No future or
task per wait.
"""
from __future__ import annotations

import asyncio
import collections


class OffsetWaits:
    def __init__(self, shared, slot: int, loop: asyncio.AbstractEventLoop, field: int, slot_field: int, waker=None):
        """``field``: the control block's offset waited on; ``slot_field``: where the oldest wait is
        published in the slot's row; ``waker``: the mover's, posted when a wait is published (None:
        the mover looks at the rows itself)."""
        self.ctl, self.row, self.loop = shared.control, shared.slots[slot], loop
        self.field, self.slot_field, self.waker = field, slot_field, waker
        self.waits: collections.deque = collections.deque()   # (end offset, loop-time deadline, callback)
        self.timer: asyncio.TimerHandle | None = None

    def __bool__(self) -> bool:
        return bool(self.waits)

    def after(self, end_offset: int, timeout_s: float, callback) -> None:
        """``callback(True)`` once the offset has reached ``end_offset``, or ``callback(False)``
        after ``timeout_s``.  Called with end offsets in append order."""
        if self.ctl[self.field] >= end_offset:
            callback(True)
            return
        waits = self.waits
        waits.append((end_offset, self.loop.time() + timeout_s, callback))
        if len(waits) == 1:
            self._publish()
            self.timer = self.loop.call_at(waits[0][1], self._time_out)

    def settle(self) -> None:
        """On a wake: answer what the offset has passed."""
        waits = self.waits
        if not waits:
            return
        reached = int(self.ctl[self.field])
        if waits[0][0] > reached:
            return
        while waits and waits[0][0] <= reached:
            waits.popleft()[2](True)
        self._rearm()

    def _time_out(self) -> None:
        now, waits = self.loop.time(), self.waits
        while waits and waits[0][1] <= now:
            waits.popleft()[2](False)
        self._rearm()

    def _rearm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self._publish()
        if self.waits:
            self.timer = self.loop.call_at(self.waits[0][1], self._time_out)

    def _publish(self) -> None:
        self.row[self.slot_field] = self.waits[0][0] if self.waits else 0
        if self.waits and self.waker is not None:
            self.waker.post()
