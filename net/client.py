"""An asyncio remoting client connection around the sans-IO codec: what the broker uses to
register with name servers and what the pure-Python client (``client/``) talks through.

``invoke`` sends a request and awaits the response with the same opaque; ``oneway`` sends and
forgets; requests the peer sends us (a broker's NOTIFY_CONSUMER_IDS_CHANGED) go to ``on_request``.
A closed connection fails every pending invoke with ``ConnectionError``; bytes that are not a
frame close it.
"""
from __future__ import annotations

import asyncio
import logging

from rocketbox.net.pending import Pending, RemotingError, TimedOut, Unanswered, next_opaque
from rocketbox.remoting import codec
from rocketbox.remoting.codec import Command, Decoder, FrameError

__all__ = ["Connection", "RemotingError", "TimedOut", "Unanswered", "connect", "split_addr", "split_addrs"]
log = logging.getLogger("rocketbox.net")


class Connection(asyncio.Protocol):
    def __init__(self, addr: str, on_request=None):
        self.addr, self.on_request = addr, on_request
        self.decoder = Decoder()
        self.calls = Pending(addr)
        # set by connection_made, which the loop calls before create_connection hands the connection over
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.closed = asyncio.get_running_loop().create_future()

    # ------------------------------------------------------------ protocol
    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.calls.fail(ConnectionError(f"connection to {self.addr} closed" + (f": {exc}" if exc else "")))
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
                self.calls.answer(cmd)
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
        return await self.calls.call(self.send, cmd, timeout)

    def oneway(self, cmd: Command) -> None:
        cmd.opaque = next_opaque()
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
