"""An asyncio remoting client connection around the sans-IO codec: what the broker uses to
register with name servers and what the pure-Python client (``client/``) talks through.

``invoke`` sends a request and awaits the response with the same opaque; ``oneway`` sends and
forgets; requests the peer sends us (a broker's NOTIFY_CONSUMER_IDS_CHANGED) go to ``on_request``.
A closed connection fails every pending invoke with ``ConnectionError``; bytes that are not a
frame close it.
"""
from __future__ import annotations

import asyncio
import itertools
import logging

from remoting import codec
from remoting.codec import Command, Decoder, FrameError

log = logging.getLogger("rocketbox.net")
_opaques = itertools.count(1)


class RemotingError(Exception):
    """The request could not be completed on this connection (closed, timed out)."""


class Unanswered(RemotingError):
    """The request was written and no answer came (time-out, or the connection closed after):
    what it asked for may have been done all the same."""


class Connection(asyncio.Protocol):
    def __init__(self, addr: str, on_request=None):
        self.addr, self.on_request = addr, on_request
        self.decoder = Decoder()
        self.pending: dict[int, asyncio.Future] = {}
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()

    # ------------------------------------------------------------ protocol
    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        err = ConnectionError(f"connection to {self.addr} closed" + (f": {exc}" if exc else ""))
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(err)
        self.pending.clear()
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        try:
            commands = self.decoder.feed(data)
        except FrameError as e:
            log.warning("closing connection to %s: %s", self.addr, str(e)[:200])
            self.transport.close()
            return
        for cmd in commands:
            if cmd.is_response:
                fut = self.pending.pop(cmd.opaque, None)
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
            elif self.on_request is not None:
                self.on_request(cmd, self)

    # ------------------------------------------------------------ API
    @property
    def is_open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def send(self, cmd: Command) -> None:
        if not self.is_open:
            raise ConnectionError(f"connection to {self.addr} is closed")
        self.transport.write(codec.encode(cmd))

    async def invoke(self, cmd: Command, timeout: float) -> Command:
        cmd.opaque = next(_opaques) & 0x7FFFFFFF
        fut = asyncio.get_running_loop().create_future()
        self.pending[cmd.opaque] = fut
        try:
            self.send(cmd)                  # a ConnectionError here: nothing was sent
            try:
                return await asyncio.wait_for(fut, timeout)
            except asyncio.TimeoutError:
                raise Unanswered(f"no response from {self.addr} to code {cmd.code} within {timeout:.1f} s") from None
            except ConnectionError as e:
                raise Unanswered(str(e)) from None
        finally:
            self.pending.pop(cmd.opaque, None)

    def oneway(self, cmd: Command) -> None:
        cmd.opaque = next(_opaques) & 0x7FFFFFFF
        cmd.flag |= codec.RPC_ONEWAY
        self.send(cmd)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def split_addrs(text: str) -> list[str]:
    """``host:port;host:port`` (namesrvAddr's form) -> the addresses, blanks dropped."""
    return [a.strip() for a in text.split(";") if a.strip()]


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address '{addr}' is not host:port")
    return host, int(port)


async def connect(addr: str, timeout: float = 3.0, on_request=None) -> Connection:
    host, port = split_addr(addr)
    loop = asyncio.get_running_loop()
    try:
        _t, conn = await asyncio.wait_for(loop.create_connection(lambda: Connection(addr, on_request), host, port),
                                          timeout)
    except asyncio.TimeoutError:
        raise RemotingError(f"connect to {addr} timed out after {timeout:.1f} s") from None
    return conn
