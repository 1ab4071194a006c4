"""The lite pull consumer (Java's ``DefaultLitePullConsumer``, 4.6+): messages are pulled in the
background, and the application takes them with ``poll`` when it is ready for them.

Built on the push consumer's machinery (routes, rebalancing, one pull loop per owned queue, offset
stores), whose listener here hands each batch over to ``poll`` and waits until it is taken: at
most two batches per queue wait (the one handed over and the one pulled ahead). A queue's offset
moves past a batch when ``poll`` returns it, as Java's does. With ``auto_commit`` (Java's default)
the moved offsets are committed every 5 s, when a queue is given up and at shutdown; without it,
only ``commit`` commits them, so a member that stops before it commits has its next owner read the
uncommitted messages again (at least once). ``subscribe`` shares the topic's queues with the
group's other members; ``assign`` takes the queues given, and ``seek`` moves one.
"""
from __future__ import annotations

import asyncio
import time

from rocketbox.client.consumer import PushConsumer
from rocketbox.client.instance import ClientInstance, MessageQueue
from rocketbox.client.message import MessageExt
from rocketbox.client.offsets import RemoteOffsets


class _Handed:
    """One batch handed over to ``poll``: its queue, its messages, and the future its pull loop
    waits on (done once polled, or cancelled with the loop)."""
    __slots__ = ("mq", "msgs", "taken")

    def __init__(self, mq: MessageQueue, msgs: list[MessageExt], taken: asyncio.Future[None]) -> None:
        self.mq, self.msgs, self.taken = mq, msgs, taken


class _CommittedOnRequest(RemoteOffsets):
    """The group's offsets when they move only by ``commit``: the pull loops' updates are ignored."""

    def update(self, mq: MessageQueue, offset: int) -> None:
        """(A pull loop's move: not the application's commit.)"""

    def accept(self, mq: MessageQueue, offset: int) -> None:
        """The application committed ``offset`` of ``mq``."""
        self.table[mq] = offset


class LitePullConsumer(PushConsumer):
    """A lite pull consumer of ``group``: ``subscribe`` (or ``assign``), ``await start()``, then
    ``await poll()`` for the next messages; ``commit`` commits what was polled (``auto_commit``:
    every 5 s as well)."""

    SUBSCRIBES_RETRY = False          # nothing is sent back: a polled message is consumed

    def __init__(self, group: str, namesrv: str, *, model: str = "CLUSTERING",
                 consume_from: str = "CONSUME_FROM_LAST_OFFSET", pull_batch: int = 10, auto_commit: bool = True,
                 offset_dir: str | None = None, instance: ClientInstance | None = None) -> None:
        super().__init__(group, namesrv, model=model, consume_from=consume_from, pull_batch=pull_batch,
                         offset_dir=offset_dir, instance=instance)
        self.auto_commit = auto_commit
        if not auto_commit and model == "CLUSTERING":
            self.offsets = _CommittedOnRequest(self.instance, group)
        self.polled: dict[MessageQueue, int] = {}          # where each queue's polled messages end
        self.assigned: list[MessageQueue] | None = None
        self.handed: asyncio.Queue[_Handed] = asyncio.Queue()
        super().register(self._hand_over)

    def assign(self, mqs: list[MessageQueue]) -> LitePullConsumer:
        """Consume these queues (no rebalancing: the group's other members are not asked), from the
        group's committed offsets or where ``consume_from`` says. Call before ``start`` (and
        without ``subscribe``)."""
        self.assigned = sorted(mqs, key=MessageQueue.sort_key)
        for mq in self.assigned:
            self.subs.setdefault(mq.topic, ("*", [], int(time.time() * 1000)))
        return self

    async def _owned(self) -> set[MessageQueue]:
        if self.assigned is not None:
            return set(self.assigned)
        return await super()._owned()

    async def _hand_over(self, msgs: list[MessageExt]) -> bool:
        """The listener: hand the batch to ``poll`` and wait until it is taken."""
        m = msgs[0]
        taken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self.handed.put(_Handed(MessageQueue(m.topic, m.broker_name, m.queue_id), msgs, taken))
        await taken
        return True

    async def poll(self, timeout_s: float = 5.0) -> list[MessageExt]:
        """The next batch pulled (up to ``pull_batch`` messages of one queue, in its order); [] when
        none came within ``timeout_s``. Its queue's offset moves past it now."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                h = await asyncio.wait_for(self.handed.get(), max(deadline - time.monotonic(), 0))
            except asyncio.TimeoutError:
                return []
            if h.taken.done():                 # its loop stopped (a seek, the queue given up): pulled again
                continue
            h.taken.set_result(None)
            end = h.msgs[-1].queue_offset + 1
            self.polled[h.mq] = max(self.polled.get(h.mq, 0), end)
            if self.auto_commit:
                self.offsets.update(h.mq, max(self.offsets.table.get(h.mq, 0), end))
            return h.msgs

    async def commit(self) -> None:
        """Commit every queue's polled offset now (Java's ``commitSync``); with ``auto_commit`` the
        offsets moved as the messages were polled."""
        if isinstance(self.offsets, _CommittedOnRequest):
            for mq, offset in self.polled.items():
                self.offsets.accept(mq, offset)
        await self._commit_all()

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Pull ``mq`` (a queue this member consumes) from ``offset`` next; what was pulled of it
        and not polled yet is dropped."""
        self.polled[mq] = offset
        if not await self.reset_offsets(mq.topic, {mq: offset}):
            raise ValueError(f"{mq} is not consumed by this member")

    def register(self, listener: object) -> LitePullConsumer:
        """(A lite pull consumer has no listener: ``poll`` takes the messages.)"""
        raise TypeError("a LitePullConsumer has no listener: poll() takes its messages")
