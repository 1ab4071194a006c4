"""A blocking remoting client for tests: send a command (or raw bytes), read the reply.  Requests
the server pushes meanwhile (NOTIFY_CONSUMER_IDS_CHANGED) are kept in ``pushed``; ``read_request``
and ``answer`` play a client the broker asks something (GET_CONSUMER_RUNNING_INFO)."""
from __future__ import annotations

import socket

from rocketbox.remoting import codec
from rocketbox.remoting.codec import Command, Decoder


class Wire:
    def __init__(self, host: str, port: int, timeout: float = 5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.decoder = Decoder()
        self.opaque = 0
        self.pushed: list[Command] = []
        self.responses: list[Command] = []

    def call(self, code: int, ext: dict | None = None, body: bytes = b"", **kw) -> Command:
        self.send(code, ext, body, **kw)
        return self.read_response()

    def send(self, code: int, ext: dict | None = None, body: bytes = b"", **kw) -> int:
        """Send a request without reading its reply (pipelining); its opaque."""
        self.opaque += 1
        self.sock.sendall(codec.encode(Command(code, ext, body, opaque=self.opaque, **kw)))
        return self.opaque

    def call_raw(self, raw: bytes) -> Command:
        self.sock.sendall(raw)
        return self.read_response()

    def read_response(self) -> Command:
        while not self.responses:
            self._read()
        return self.responses.pop(0)

    def read_request(self) -> Command:
        """The next request the server sent us (oldest first)."""
        while not self.pushed:
            self._read()
        return self.pushed.pop(0)

    def _read(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("closed by the server")
        for cmd in self.decoder.feed(data):
            (self.responses if cmd.is_response else self.pushed).append(cmd)

    def answer(self, req: Command, code: int = 0, remark: str | None = None, ext: dict | None = None,
               body: bytes = b"") -> None:
        """Reply to a request the server sent us."""
        self.sock.sendall(codec.encode(req.response(code, remark, ext, body)))

    def oneway(self, code: int, ext: dict | None = None, body: bytes = b"") -> None:
        self.opaque += 1
        self.sock.sendall(codec.encode(Command(code, ext, body, opaque=self.opaque, flag=codec.RPC_ONEWAY)))

    def closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()
