"""Pulls held until their queue grows (long polling), kept by queue.

RocketMQ's ``PullRequestHoldService`` keeps held pulls per topic@queueId and looks at one queue's
holds when a message arrives on it.  Here a wake (the dispatcher's post, the reader's tick) looks
at every held queue at once: ``want[s]`` is the lowest offset a pull held on queue slot ``s``
waits past (its ``scanned`` mark; int64 max where none is held), so the queues that grew are one
vector comparison with the shared max-offset column, whatever the number of holds.  Holding,
answering or timing out a pull touches only its own queue's list.  A queue that has no slot yet
(nothing was ever dispatched to it) is held by name and placed once the shared queue table grows.
While any pull is held, the slot's ``DISPATCH_WAIT`` asks the dispatcher to post the slot's waker
after each pass.

A pull with a tag filter is woken, as RocketMQ's (``notifyMessageArriving`` asks the pull's
``MessageFilter``), only by a message it would take: when its queue grows by messages of other
tags it stays held, its ``scanned`` mark moved past them so they are not looked at again.  Woken
by each, a filtered consumer would get PULL_RETRY_IMMEDIATELY and come straight back, a round trip
per message of every other group on the queue.
"""
from __future__ import annotations

import asyncio
import logging

import numpy as np

from rocketbox.shm.layout import C, S
from rocketbox.shm.tables import QueueIndex

log = logging.getLogger("rocketbox.reader")
NONE_WANTED = np.iinfo(np.int64).max


class Hold:
    __slots__ = ("slot", "queue", "scanned", "codes", "callback", "timer")

    def __init__(self, slot: int | None, queue: tuple[str, int], offset: int, codes, callback):
        self.slot, self.queue, self.codes, self.callback = slot, queue, codes, callback   # slot None: unplaced
        self.scanned = offset           # the pull's offset, then past the messages that did not match ``codes``
        self.timer: asyncio.TimerHandle = None  # type: ignore[assignment]   # set as it is held


class HeldPulls:
    def __init__(self, queues: QueueIndex, loop, slot_row: np.ndarray, tags):
        """``tags(topic, queue_id, start, end)``: the tag codes of the queue's messages [start,
        end), or None (``StoreView.tags``)."""
        self.queues, self.loop, self.slot_row, self.tags = queues, loop, slot_row, tags
        self.max_offsets = queues.max_offsets
        self.want = np.full(len(self.max_offsets), NONE_WANTED, dtype=np.int64)
        self.by_slot: dict[int, list[Hold]] = {}
        self.unplaced: dict[tuple[str, int], list[Hold]] = {}   # queues with no slot yet, by (topic, id)
        self.placed_at = -1                                      # QUEUE_COUNT when they were last looked up
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def hold(self, topic: str, queue_id: int, offset: int, codes, timeout_s: float, callback) -> None:
        """``callback(True)`` once the queue's published max offset passes ``offset`` with a
        message of one of the tag ``codes`` (None: any), at once if it already has;
        ``callback(False)`` after ``timeout_s``."""
        self.slot_row[S.DISPATCH_WAIT] = 1      # first: what is dispatched from now on wakes us
        s = self.queues.slot(topic, queue_id)
        h = Hold(s, (topic, queue_id), offset, codes, callback)
        h.timer = self.loop.call_later(timeout_s, self._timed_out, h)
        if s is None:
            self.unplaced.setdefault(h.queue, []).append(h)
        else:
            self.by_slot.setdefault(s, []).append(h)
            self.want[s] = min(int(self.want[s]), offset)
        self._counted(1)
        if s is not None and int(self.max_offsets[s]) > offset:     # it grew since the pull looked
            self._end_grown(s, int(self.max_offsets[s]))

    def settle(self) -> None:
        """End every hold whose queue has grown by a message it takes."""
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
                h.slot = s
            self._keep(s, self.by_slot.pop(s, []) + holds)

    def _end_grown(self, s: int, max_offset: int) -> None:
        held, ended, kept = self.by_slot.pop(s), [], []
        first, tags = self._new_tags(held, max_offset)
        for h in held:
            if h.scanned >= max_offset:
                kept.append(h)
            elif h.codes is None or tags is None or any((tags[h.scanned - first:] == c).any() for c in h.codes):
                ended.append(h)
            else:                                   # only other tags came: held on, past them
                h.scanned = max_offset
                kept.append(h)
        self._keep(s, kept)
        self._counted(-len(ended))
        for h in ended:
            h.timer.cancel()
            _call(h.callback, True)

    def _new_tags(self, held: list[Hold], max_offset: int) -> tuple[int, np.ndarray | None]:
        """(first, the tag codes of the queue's messages [first, ``max_offset``)): what its
        filtered holds have not looked at yet, read once for all of them; None when none is
        filtered, or the codes cannot be read (the pulls then run and answer for themselves)."""
        filtered = [h for h in held if h.codes is not None and h.scanned < max_offset]
        if not filtered:
            return 0, None
        first = min(h.scanned for h in filtered)
        try:
            return first, self.tags(*filtered[0].queue, first, max_offset)
        except Exception:
            log.exception("reading the tags of %s@%d for its held pulls failed", *filtered[0].queue)
            return first, None

    def _timed_out(self, h: Hold) -> None:
        if h.slot is None:
            kept = [o for o in self.unplaced.pop(h.queue) if o is not h]
            if kept:
                self.unplaced[h.queue] = kept
        else:
            self._keep(h.slot, [o for o in self.by_slot.pop(h.slot) if o is not h])
        self._counted(-1)
        _call(h.callback, False)

    def _counted(self, change: int) -> None:
        self.count += change
        self.slot_row[S.DISPATCH_WAIT] = 1 if self.count else 0

    def _keep(self, s: int, kept: list[Hold]) -> None:
        if kept:
            self.by_slot[s] = kept
            self.want[s] = min(h.scanned for h in kept)
        else:
            self.want[s] = NONE_WANTED


def _call(callback, grew: bool) -> None:
    try:
        callback(grew)
    except Exception:       # one broken callback must not cost the other pulls their answers
        log.exception("long-poll callback failed")
