"""Requests sent over one connection and awaiting their answers, matched by opaque: what a
client connection (net/client.py) does for every request it makes, and what a reader's
connection (net/server.py) does for the few requests a broker makes of its clients
(GET_CONSUMER_RUNNING_INFO, which Java's Broker2Client.callClient sends).
"""
from __future__ import annotations

import asyncio
import itertools

from rocketbox.remoting.codec import Command

_opaques = itertools.count(1)


def next_opaque() -> int:
    """A fresh opaque for a request this process sends (31 bits, as Java's AtomicInteger wraps)."""
    return next(_opaques) & 0x7FFFFFFF


class RemotingError(Exception):
    """The request could not be completed on this connection (closed, timed out)."""


class Unanswered(RemotingError):
    """The request was written and no answer came (time-out, or the connection closed after):
    what it asked for may have been done all the same."""


class TimedOut(Unanswered):
    """No answer within the time allowed (Java's RemotingTimeoutException)."""


class Pending:
    def __init__(self, addr: str):
        self.addr = addr                     # the peer, for errors
        self.futures: dict[int, asyncio.Future] = {}

    async def call(self, send, cmd: Command, timeout: float) -> Command:
        """Give ``cmd`` a fresh opaque, ``send`` it, and await its answer for up to ``timeout`` s.
        A ConnectionError from ``send`` means nothing was sent; ``Unanswered`` that it was (``TimedOut``
        when no answer came in time)."""
        cmd.opaque = next_opaque()
        fut = asyncio.get_running_loop().create_future()
        self.futures[cmd.opaque] = fut
        try:
            send(cmd)
            try:
                return await asyncio.wait_for(fut, timeout)
            except asyncio.TimeoutError:
                raise TimedOut(f"no response from {self.addr} to code {cmd.code} within {timeout:.1f} s") from None
            except ConnectionError as e:
                raise Unanswered(str(e)) from None
        finally:
            self.futures.pop(cmd.opaque, None)

    def answer(self, resp: Command) -> None:
        """A response came: its caller's, if one still waits (a late one is dropped)."""
        fut = self.futures.pop(resp.opaque, None)
        if fut is not None and not fut.done():
            fut.set_result(resp)

    def fail(self, err: Exception) -> None:
        """The connection closed: every caller gets ``err``."""
        for fut in self.futures.values():
            if not fut.done():
                fut.set_exception(err)
        self.futures.clear()
