"""The client for scripts and threads: each call blocks until it is done. The asyncio client runs
on an event loop of its own, in a thread the object starts and ``shutdown`` (or the ``with``
block's end) stops, so these can be used from any thread, and from code that has no loop.

``SyncProducer`` sends; ``SyncLitePullConsumer`` polls (the lite pull consumer: messages pulled in
the background, taken by ``poll``). For listeners and everything else, the asyncio API.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

from rocketbox.client.instance import MessageQueue
from rocketbox.client.litepull import LitePullConsumer
from rocketbox.client.message import Message, MessageExt, SendResult
from rocketbox.client.producer import Producer, Selector

T = TypeVar("T")


class _LoopThread:
    """An event loop running in a daemon thread of its own; ``run`` blocks on a coroutine there."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self.thread:
            raise RuntimeError("a blocking rocketbox call from its own loop's thread (a listener?) would never end")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class _Blocking:
    """What the blocking facades share: ``with`` ends in ``shutdown``."""

    def shutdown(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.shutdown()


class SyncProducer(_Blocking):
    """``Producer`` whose calls block: ``with SyncProducer(group, namesrv) as p: p.send(msg)``."""

    def __init__(self, group: str, namesrv: str, **options: Any) -> None:
        """``options``: ``Producer``'s (``send_timeout_s``, ``retries``, ...). Started at once."""
        self._thread = _LoopThread(f"rocketbox-producer-{group}")

        async def start() -> Producer:
            return await Producer(group, namesrv, **options).start()
        self._producer = self._thread.run(start())

    def send(self, msg: Message, *, queue: MessageQueue | None = None, selector: Selector | None = None,
             arg: Any = None) -> SendResult:
        """``Producer.send``: the broker's answer."""
        return self._thread.run(self._producer.send(msg, queue=queue, selector=selector, arg=arg))

    def send_batch(self, msgs: list[Message], *, queue: MessageQueue | None = None) -> SendResult:
        """``Producer.send_batch``."""
        return self._thread.run(self._producer.send_batch(msgs, queue=queue))

    def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None) -> None:
        """``Producer.send_oneway``."""
        self._thread.run(self._producer.send_oneway(msg, queue=queue))

    def shutdown(self) -> None:
        """``Producer.shutdown``, then the loop's thread ends."""
        self._thread.run(self._producer.shutdown())
        self._thread.stop()


class SyncLitePullConsumer(_Blocking):
    """``LitePullConsumer`` whose calls block: subscribe (or assign), ``start``, then ``poll``."""

    def __init__(self, group: str, namesrv: str, **options: Any) -> None:
        """``options``: ``LitePullConsumer``'s (``consume_from``, ``auto_commit``, ...)."""
        self._thread = _LoopThread(f"rocketbox-consumer-{group}")

        async def make() -> LitePullConsumer:
            return LitePullConsumer(group, namesrv, **options)
        self._consumer = self._thread.run(make())

    def subscribe(self, topic: str, expression: str = "*") -> SyncLitePullConsumer:
        """``LitePullConsumer.subscribe``."""
        self._consumer.subscribe(topic, expression)
        return self

    def assign(self, mqs: list[MessageQueue]) -> SyncLitePullConsumer:
        """``LitePullConsumer.assign``."""
        self._consumer.assign(mqs)
        return self

    def start(self) -> SyncLitePullConsumer:
        """``LitePullConsumer.start``. -> self."""
        self._thread.run(self._consumer.start())
        return self

    def poll(self, timeout_s: float = 5.0) -> list[MessageExt]:
        """``LitePullConsumer.poll``: the next batch, [] after ``timeout_s`` without one."""
        return self._thread.run(self._consumer.poll(timeout_s))

    def commit(self) -> None:
        """``LitePullConsumer.commit``."""
        self._thread.run(self._consumer.commit())

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """``LitePullConsumer.seek``."""
        self._thread.run(self._consumer.seek(mq, offset))

    def shutdown(self) -> None:
        """``LitePullConsumer.shutdown``, then the loop's thread ends."""
        self._thread.run(self._consumer.shutdown())
        self._thread.stop()
