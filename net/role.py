"""The life of a role that is one uvloop event loop (a reader, the name server).

``appliance run ROLE`` calls ``open()``, ``run()`` until a stop is requested, then ``close()``.
``run`` runs ``serve()`` on a new uvloop loop; SIGTERM calls ``request_stop`` (a flag, and the
loop's stop event set from the signal handler's thread-safe call), and ``sleep(seconds)`` inside
``serve`` ends early at it.
"""
from __future__ import annotations

import asyncio


class ServerRole:
    def __init__(self) -> None:
        self.stop_requested = False
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]   # set as serving begins
        self._stop: asyncio.Event | None = None

    def open(self) -> ServerRole:
        return self

    def close(self) -> None:
        pass

    async def serve(self) -> None:
        """Serve until ``stop_requested``."""
        raise NotImplementedError

    def run(self) -> None:
        import uvloop
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(self._serve())

    async def _serve(self) -> None:
        self.loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        if not self.stop_requested:
            await self.serve()

    async def sleep(self, seconds: float) -> None:
        """Until ``seconds`` pass or a stop is requested."""
        assert self._stop is not None
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def request_stop(self) -> None:
        self.stop_requested = True
        self.wake()

    def wake(self) -> None:
        """From the SIGTERM handler: end a ``sleep``."""
        if self._stop is not None and self.loop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
