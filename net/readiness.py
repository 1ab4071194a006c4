"""When the appliance serves, and how systemd hears it: ``answers`` (a port accepts; through a
broker port a request is answered) and ``notify`` (sd_notify(3) for a Type=notify unit). The
supervisor's ready line and the HAProxy unit's READY=1 both rest on them."""
from __future__ import annotations

import os
import socket

from rocketbox.remoting import codec
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import RequestCode


def answers(host: str, port: int, broker: bool) -> bool:
    """Something listens on ``host:port``; for a broker port, a request through it is answered
    (through HAProxy that also means HAProxy counts a reader up: its health checks mark one down
    until it answers, and a connection meanwhile is closed)."""
    try:
        with socket.create_connection((host, port), 1.0) as s:
            if not broker:
                return True
            s.settimeout(1.0)
            s.sendall(codec.encode(Command(RequestCode.GET_BROKER_RUNTIME_INFO, {})))
            decoder = codec.Decoder()
            while True:
                data = s.recv(1 << 16)
                if not data:
                    return False
                for reply in decoder.feed(data):
                    return reply.code == 0
    except (OSError, codec.FrameError):
        return False


def notify(state: str) -> None:
    """sd_notify(3): tell systemd ``state`` when it asked (``NOTIFY_SOCKET``, a Type=notify unit)."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.connect("\0" + addr[1:] if addr.startswith("@") else addr)
        s.sendall(state.encode())
