"""An asyncio TCP server around the sans-IO remoting codec: what the name server and the reader
processes listen with.

One ``Decoder`` per connection.  Each request goes to the handler registered for its code; a
handler returns the response ``Command`` (or None: nothing to say), a coroutine for work that
waits (topic creation), or ``DEFERRED``: it has taken the request and will answer it
itself through ``Connection.send_reply``, ``write`` or ``reply_pieces`` (sends, held pulls: no task per
request).
Rules, FACTS §1.7 and STYLE "errors at the edges":

* bytes that are not a frame: one bounded log line, that connection closed, the server lives on;
* no handler for the code: REQUEST_CODE_NOT_SUPPORTED, " request type N not supported";
* ``HeaderError`` (a field missing, of the wrong type, or past what the broker holds): SYSTEM_ERROR
  with its text as remark;
* any other exception in a handler: logged, SYSTEM_ERROR with the exception's text;
* oneway requests are never answered; a response from a client goes to the ``invoke`` that sent
  its request (a reader asking a consumer for its running info), or is dropped if none waits;
* a connection idle for ``idle_s`` (no read, no write) is closed, as Netty's 120 s;
* open files: at its RLIMIT_NOFILE a process cannot accept, and the event loop says nothing, so
  the idle sweep (every <= 10 s) also counts the descriptors held (when the descriptor table's
  size does not already bound them below the mark) and warns once past ``FD_WARN`` of the limit
  (again after falling below ``FD_REARM``);
* a PROXY v2 header in front of the first frame (HAProxy's, net/proxy.py) gives the peer address;
* a client that does not read its replies stops being read: once ``OUT_HIGH`` bytes of replies
  wait for it (this loop turn's and the transport's), its further requests wait undispatched
  and its socket is not read, until it has read them down to ``OUT_LOW``.  So a consumer that
  pipelines pulls and never reads costs a reader a few MiB, not memory without bound.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import os
import resource
import time

from rocketbox.net import proxy
from rocketbox.net.pending import Pending
from rocketbox.remoting import codec
from rocketbox.remoting.codec import Command, Decoder, FrameError
from rocketbox.remoting.codes import ResponseCode
from rocketbox.remoting.headers import HeaderError

log = logging.getLogger("rocketbox.net")
IDLE_S = 120.0
DEFERRED = object()       # a handler's "I will answer this myself"
FD_WARN, FD_REARM = 0.9, 0.8   # share of RLIMIT_NOFILE in use: warn past the first, re-arm below the second
BACKLOG = 1024            # listen queue, RocketMQ's serverSocketBacklog: HAProxy opens a reader connection per
                          # client at once, and 600 clients at once overflowed asyncio's 100 (the kernel's
                          # SYN cookies then lost some: clients closed before their first reply)
OUT_HIGH = 4 << 20        # replies waiting for a client: stop taking its requests ...
OUT_LOW = 1 << 20         # ... until it has read them down to this


class Connection(asyncio.Protocol):
    def __init__(self, server: "RemotingServer"):
        self.server, self.decoder = server, Decoder()
        # both set by connection_made, which the loop calls before anything else can reach the connection
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.peer, self.peer_addr = "?", ("127.0.0.1", 0)    # "host:port" for logs; (host, port)
        self.last_io = time.monotonic()
        self.out: list = []               # replies of this loop turn (frames, pieces of frames), written as one
        self.out_bytes = 0                # their size
        self.head: bytes | None = b""     # the first bytes, until we know whether a PROXY header leads
        self.backlog: list[Command] | None = None     # requests read while the client reads no replies
        self.writing_paused = self.reading_paused = False
        self.calls: Pending | None = None         # requests we sent the client (made on the first)

    def connection_made(self, transport) -> None:
        self.transport, self.loop = transport, asyncio.get_running_loop()   # (each lookup is a getpid())
        peer = transport.get_extra_info("peername")
        self.peer_addr = (peer[0], peer[1]) if peer else ("127.0.0.1", 0)
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        transport.set_write_buffer_limits(high=OUT_HIGH, low=OUT_LOW)
        self.server.connections.add(self)

    def connection_lost(self, exc) -> None:
        self.backlog = None                       # a gone client's unread requests are not run
        if self.calls is not None:
            self.calls.fail(ConnectionError(f"connection from {self.peer} closed"))
        self.server.connections.discard(self)
        if self.server.on_close is not None:
            self.server.on_close(self)

    def data_received(self, data: bytes) -> None:
        self.last_io = time.monotonic()
        if self.head is not None:
            data = self._proxy_header(data)
            if not data:
                return
        try:
            commands = self.decoder.feed(data)
        except FrameError as e:
            log.warning("%s: closing connection from %s: %s", self.server.name, self.peer, str(e)[:200])
            self.transport.close()
            return
        if self.backlog is not None:              # read before the pause took effect
            self.backlog += commands
            return
        self._run(commands)

    def _run(self, commands: list[Command]) -> None:
        """Dispatch requests in order while the replies waiting for this client stay under
        ``OUT_HIGH``; the rest wait in ``backlog``, and the socket is not read meanwhile."""
        for i, cmd in enumerate(commands):
            if self.writing_paused or self.out_bytes >= OUT_HIGH:
                self.backlog = commands[i:]
                if not self.reading_paused:
                    self.reading_paused = True
                    self.transport.pause_reading()
                return
            if not cmd.is_response:
                self._dispatch(cmd)
            elif self.calls is not None:
                self.calls.answer(cmd)

    def pause_writing(self) -> None:
        """The transport holds ``OUT_HIGH`` bytes the client has not read: read nothing more."""
        self.writing_paused = True
        if not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._resume()

    def _resume(self) -> None:
        """The client reads again: the waiting requests, then its socket."""
        if self.transport is None or self.transport.is_closing():
            return
        backlog, self.backlog = self.backlog, None
        if backlog:
            self._run(backlog)
        if self.backlog is None and not self.writing_paused and self.reading_paused:
            self.reading_paused = False
            self.transport.resume_reading()

    def _proxy_header(self, data: bytes) -> bytes:
        """Strip a PROXY v2 header (net/proxy.py) and take the client address from it; what
        follows it, b"" while more bytes are needed (called while ``head`` is not None)."""
        head = self.head = (self.head or b"") + data
        try:
            got = proxy.parse(head)
        except proxy.ProxyError as e:
            log.warning("%s: closing connection from %s: %s", self.server.name, self.peer, e)
            self.transport.close()
            return b""
        if got is None:
            return b""
        used, addr = got
        data, self.head = head[used:], None
        if addr is not None:
            self.peer_addr, self.peer = addr, f"{addr[0]}:{addr[1]}"
        return data

    def _dispatch(self, cmd: Command) -> None:
        handler = self.server.handlers.get(cmd.code)
        if handler is None:
            self.send_reply(cmd, cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                              f" request type {cmd.code} not supported"))
            return
        try:
            resp = handler(cmd, self)
        except Exception as e:
            resp = self.failure(cmd, e)
        if resp is DEFERRED:
            return
        if resp is None or type(resp) is Command or not inspect.isawaitable(resp):  # (an ABC check: last)
            self.send_reply(cmd, resp)
        else:
            asyncio.ensure_future(self._finish(cmd, resp))

    async def _finish(self, cmd: Command, pending) -> None:
        try:
            resp = await pending
        except Exception as e:
            resp = self.failure(cmd, e)
        if resp is not DEFERRED:                # (a coroutine may hand the request on, answered later)
            self.send_reply(cmd, resp)

    def failure(self, cmd: Command, e: Exception) -> Command:
        """The answer to a handler that raised ``e`` (logged unless a HeaderError)."""
        if not isinstance(e, HeaderError):
            log.exception("%s: handler for code %d failed", self.server.name, cmd.code)
        return cmd.response(ResponseCode.SYSTEM_ERROR, str(e)[:500] or type(e).__name__)

    def send_reply(self, req: Command, resp: Command | None) -> None:
        if resp is not None and not req.is_oneway:
            self.send(resp)

    def reply_pieces(self, req: Command, pieces: list) -> None:
        """``send_reply`` of an answer already encoded, in pieces (``ResponseTemplate.encode_pieces``:
        a pull's records as views of the CommitLog), written as they are, never joined.  The
        first piece starts with the frame's length, so its size needs no pass over the pieces."""
        if not req.is_oneway:
            if not self.out:
                self.loop.call_soon(self._write_out)
            self.out += pieces
            self.out_bytes += 4 + int.from_bytes(pieces[0][:4], "big")

    def send(self, cmd: Command) -> None:
        self.write(codec.encode(cmd))

    async def invoke(self, cmd: Command, timeout: float) -> Command:
        """Ask the client something (a request of ours, with a fresh opaque) and await its
        answer; ``net.pending.Unanswered`` on time-out or if the connection closes first,
        ConnectionError if it was closed already."""
        if self.transport is None or self.transport.is_closing():
            raise ConnectionError(f"connection from {self.peer} is closed")
        if self.calls is None:
            self.calls = Pending(self.peer)
        return await self.calls.call(self.send, cmd, timeout)

    def write(self, frame: bytes) -> None:
        """Queue an encoded frame; everything queued in this loop turn goes out in one write (one
        writev and, through HAProxy, one packet for a pipelining client's whole burst)."""
        if not self.out:
            self.loop.call_soon(self._write_out)
        self.out.append(frame)
        self.out_bytes += len(frame)

    def _write_out(self) -> None:
        out, self.out, self.out_bytes = self.out, [], 0
        if self.transport is not None and not self.transport.is_closing():
            self.last_io = time.monotonic()
            if len(out) == 1:
                self.transport.write(out[0])
            else:                       # uvloop: one writev of the pieces as they are (asyncio's joins them)
                self.transport.writelines(out)
            if self.backlog is not None and not self.writing_paused:
                self.loop.call_soon(self._resume)     # the transport took it all: go on with the backlog


def fd_table_size() -> int:
    """The process's descriptor table size (``FDSize``, past its highest descriptor so far): a
    bound on how many are open that costs one small read, not a walk of them all."""
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"FDSize:"):
                return int(line.split()[1])
    return 1 << 62                  # (not Linux's /proc: count them)


class RemotingServer:
    def __init__(self, name: str, handlers: dict, idle_s: float = IDLE_S, on_close=None):
        """``on_close(conn)``: called when a connection ends (a reader forgets its clients)."""
        self.name, self.handlers, self.idle_s, self.on_close = name, handlers, idle_s, on_close
        self.connections: set[Connection] = set()
        self.server: asyncio.base_events.Server | None = None
        self._reaper: asyncio.Task | None = None
        self.files_warned = False

    async def start(self, host: str, port: int) -> "RemotingServer":
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: Connection(self), host, port, reuse_address=True,
                                               backlog=BACKLOG)
        self._reaper = loop.create_task(self._reap_idle())
        return self

    @property
    def port(self) -> int:
        assert self.server is not None           # (started)
        return int(self.server.sockets[0].getsockname()[1])

    async def _reap_idle(self) -> None:
        while True:
            await asyncio.sleep(min(10.0, self.idle_s / 2))
            now = time.monotonic()
            for conn in [c for c in self.connections if now - c.last_io > self.idle_s]:
                log.info("%s: closing %s, idle for %.0f s", self.name, conn.peer, now - conn.last_io)
                conn.transport.close()
            self.check_open_files()

    def check_open_files(self) -> None:
        """Warn while the process nears its open-files limit, where new clients go unaccepted."""
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if limit == resource.RLIM_INFINITY:
            return
        if not self.files_warned and fd_table_size() < FD_WARN * limit:
            return                  # fewer are open than that: no count (~1 µs per descriptor) needed
        used = len(os.listdir("/proc/self/fd"))
        if not self.files_warned and used >= FD_WARN * limit:
            self.files_warned = True
            log.warning("%s: %d of %d open files in use (RLIMIT_NOFILE), %d clients connected: at the limit new "
                        "clients cannot connect, and nothing more is logged; raise the limit (systemd LimitNOFILE=, "
                        "ulimit -n)", self.name, used, limit, len(self.connections))
        elif self.files_warned and used < FD_REARM * limit:
            self.files_warned = False
            log.info("%s: %d of %d open files in use again", self.name, used, limit)

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        if self.server is not None:
            self.server.close()
            for conn in list(self.connections):
                conn.transport.close()
            await self.server.wait_closed()
