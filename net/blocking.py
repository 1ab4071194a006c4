"""One request and its answer over a connection of its own, blocking: for a process without an
event loop (the scheduler asking a reader to pass a transaction check on to a producer)."""
from __future__ import annotations

import socket

from rocketbox.remoting import codec
from rocketbox.remoting.codec import Command


def call(host: str, port: int, cmd: Command, timeout_s: float = 3.0) -> Command:
    """``cmd``'s response from ``host:port``; OSError when there is none within ``timeout_s``
    (refused, closed, timed out), codec.FrameError for bytes that are not one."""
    with socket.create_connection((host, port), timeout_s) as s:
        s.settimeout(timeout_s)
        s.sendall(codec.encode(cmd))
        decoder = codec.Decoder()
        while True:
            data = s.recv(1 << 16)
            if not data:
                raise ConnectionResetError(f"{host}:{port} closed the connection before answering")
            for reply in decoder.feed(data):
                if reply.is_response and reply.opaque == cmd.opaque:
                    return reply
