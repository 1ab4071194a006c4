"""SYNC_FLUSH: replies that wait for the flusher to have the CommitLog on disk through their end.

A queue ordered by end offset (appends are answered in order), one timer for the oldest wait, and
the oldest end offset published in the slot's ``FLUSH_WAIT`` so the flusher posts this reader's
waker once it has flushed past it.  No future or task per wait.
"""
from __future__ import annotations

import asyncio
import collections

from rocketbox.shm.layout import C, S


class FlushWaits:
    def __init__(self, shared, slot: int, loop: asyncio.AbstractEventLoop):
        self.sh, self.ctl, self.row, self.loop = shared, shared.control, shared.slots[slot], loop
        self.waits: collections.deque = collections.deque()   # (end offset, loop-time deadline, callback)
        self.timer: asyncio.TimerHandle | None = None

    def __bool__(self) -> bool:
        return bool(self.waits)

    def after_flush(self, end_offset: int, timeout_s: float, callback) -> None:
        """``callback(True)`` once the CommitLog is flushed through ``end_offset``, or
        ``callback(False)`` after ``timeout_s``.  Called with end offsets in append order."""
        if self.ctl[C.FLUSHED] >= end_offset:
            callback(True)
            return
        waits = self.waits
        waits.append((end_offset, self.loop.time() + timeout_s, callback))
        if len(waits) == 1:
            self._publish()
            self.timer = self.loop.call_at(waits[0][1], self._time_out)

    def settle(self) -> None:
        """On a wake: answer what the flusher has on disk."""
        waits = self.waits
        if not waits:
            return
        flushed = int(self.ctl[C.FLUSHED])
        if waits[0][0] > flushed:
            return
        while waits and waits[0][0] <= flushed:
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
        self.row[S.FLUSH_WAIT] = self.waits[0][0] if self.waits else 0
        if self.waits:
            self.sh.flusher_waker.post()
