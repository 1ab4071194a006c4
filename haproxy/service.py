"""The HAProxy role (``appliance run haproxy``): the client-facing listener.

HAProxy (Debian's package) listens on ``listenPort`` and on ``listenPort - 2`` (the "VIP" port Java
clients send to when ``sendMessageWithVIPChannel`` is on) and balances client TCP connections over
the reader processes (least connections).  Each reader is health-checked every second: a reader
that dies is out of rotation after one failed check — connections it held are closed, clients
reconnect to a live one — and back in after one good check once the supervisor restarts it.  A
reader out of rotation is checked every ``DOWN_CHECK_MS``: with a 1 s interval there, a restarted
reader could listen for up to a second before HAProxy used it, and if both readers had died,
HAProxy closed every new connection meanwhile.

The config is generated from broker.conf into ``<store>/run/haproxy.cfg`` at every start; this
role runs ``haproxy -db`` as its child and stops it with SIGTERM.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time

log = logging.getLogger("rocketbox.haproxy")
TIMEOUT_CLIENT_S = 180        # above the 120 s idle close of readers and the 30 s heartbeats
DOWN_CHECK_MS = 200           # how often a reader out of rotation is checked: back soon after it listens


class Unusable(RuntimeError):
    """HAProxy cannot run as configured: no binary, or it rejects the generated config."""


def binary(cfg) -> str:
    found = cfg.haproxyBinary or shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not os.access(found, os.X_OK):
        raise Unusable(f"haproxy binary '{found}' not found: install Debian's haproxy package "
                       "(./install.sh does) or set haproxyBinary in broker.conf")
    return found


MAX_PIPES = 256          # kernel pipes for splicing large replies (two descriptors each), at most
RESERVED_FDS = 64        # HAProxy's own: listeners, health checks, logs


def fd_budget() -> tuple[int, int]:
    """(maxconn, maxpipes) that fit this process's hard descriptor limit, which HAProxy raises
    its soft one to: two descriptors a connection, two a pipe, ``RESERVED_FDS`` of its own. A
    small limit gets fewer pipes first (splicing is an optimisation; connections are not), then
    fewer connections; HAProxy refuses to start if they do not fit."""
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    pipes = max(0, min(MAX_PIPES, (hard - RESERVED_FDS) // 8))
    return max(1, min(20000, (hard - RESERVED_FDS - 2 * pipes) // 2)), pipes


def render(cfg) -> str:
    servers = "\n".join(f"    server reader-{i} 127.0.0.1:{cfg.reader_port(i)} check inter 1s downinter {DOWN_CHECK_MS}ms "
                        f"fall 1 rise 1 send-proxy-v2 check-send-proxy" for i in range(cfg.readerProcessNums))
    maxconn, pipes = fd_budget()
    return f"""# generated from {cfg.source} by rocketbox; edits are overwritten at the next start
global
    maxconn {maxconn}
    nbthread 1
    maxpipes {pipes}
    hard-stop-after 5s

defaults
    mode tcp
    timeout connect 3s
    timeout client {TIMEOUT_CLIENT_S}s
    timeout server {TIMEOUT_CLIENT_S}s
    retries 3
    option redispatch
    option splice-request
    option splice-response

frontend clients
    bind 0.0.0.0:{cfg.listenPort}
    bind 0.0.0.0:{cfg.listenPort - 2}
    default_backend readers

backend readers
    balance leastconn
{servers}
"""


def configure(cfg) -> tuple[str, str]:
    """Write ``<store>/run/haproxy.cfg`` from broker.conf and have HAProxy check it: (binary,
    config path), or Unusable saying what is wrong.  ``appliance start`` calls it before any
    role starts, and the role at each of its starts."""
    exe, path = binary(cfg), os.path.join(cfg.run_dir, "haproxy.cfg")
    os.makedirs(cfg.run_dir, exist_ok=True)
    with open(path, "w") as f:
        f.write(render(cfg))
    check = subprocess.run([exe, "-c", "-q", "-f", path], capture_output=True, text=True)
    if check.returncode != 0:
        raise Unusable(f"haproxy rejects {path}: {check.stderr.strip() or check.stdout.strip()}")
    return exe, path


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when this role dies, so no haproxy outlives it."""
    import ctypes
    import ctypes.util
    ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG


class HaproxyService:
    def __init__(self, cfg):
        self.cfg = cfg
        self.stop_requested = False
        self.proc: subprocess.Popen | None = None

    def open(self) -> "HaproxyService":
        try:
            exe, path = configure(self.cfg)
        except Unusable as e:                  # what is wrong is the whole story: no traceback
            log.error("%s", e)
            raise SystemExit(2) from None
        self.proc = subprocess.Popen([exe, "-db", "-f", path], preexec_fn=_die_with_parent)
        log.info("haproxy (pid %d) starting on ports %d and %d over %d readers", self.proc.pid, self.cfg.listenPort,
                 self.cfg.listenPort - 2, self.cfg.readerProcessNums)
        return self

    def run(self) -> None:
        if os.environ.get("NOTIFY_SOCKET"):      # its unit is Type=notify: ready once a request through it is answered
            from appliance.readiness import answers, notify
            while self.proc.poll() is None and not self.stop_requested and \
                    not answers("127.0.0.1", self.cfg.listenPort, broker=True):
                time.sleep(0.2)
            notify("READY=1")
        rc = self.proc.wait()
        if not self.stop_requested:
            log.error("haproxy exited with %d (its own message is above)", rc)
            raise SystemExit(1)

    def wake(self) -> None:
        """From the SIGTERM handler: stop haproxy, which ends ``run``."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
