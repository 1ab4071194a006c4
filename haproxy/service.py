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

Connections: ``maxconn`` (and the splice pipes) fit the descriptor limit (``fd_budget``). At
``maxconn`` HAProxy would stop accepting and a client's connect would complete in the kernel's
backlog and then wait forever; so a connection past ``admission_limit`` (5% below) is accepted and
closed at once. The role reads HAProxy's counters every ``WATCH_S`` (its stats socket) and logs
once when it refuses clients; ``appliance status`` shows the connections against the limit.
"""
from __future__ import annotations

import logging
import os
import resource
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


WATCH_S = 2.0            # how often the role looks at HAProxy's counters
MAX_PIPES = 256          # kernel pipes for splicing large replies (two descriptors each), at most
RESERVED_FDS = 64        # HAProxy's own: listeners, health checks, logs


def fd_budget() -> tuple[int, int]:
    """(maxconn, maxpipes) that fit this process's hard descriptor limit, which HAProxy raises
    its soft one to: two descriptors a connection, two a pipe, ``RESERVED_FDS`` of its own. A
    small limit gets fewer pipes first (splicing is an optimisation; connections are not), then
    fewer connections; HAProxy refuses to start if they do not fit."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    pipes = max(0, min(MAX_PIPES, (hard - RESERVED_FDS) // 8))
    return max(1, min(20000, (hard - RESERVED_FDS - 2 * pipes) // 2)), pipes


def admission_limit(maxconn: int) -> int:
    """Client connections HAProxy takes; the few above, up to ``maxconn``, are accepted only to be
    closed at once. At ``maxconn`` itself HAProxy stops accepting, and a client's connect then
    completes in the kernel's backlog and waits there for an answer that never comes."""
    return max(1, maxconn - max(4, maxconn // 20))


def stats_name(cfg) -> str:
    """HAProxy's stats socket: an abstract Unix socket (no path to outgrow sun_path), one per
    appliance (its shared-memory prefix), read-only (``level user``)."""
    return f"rocketbox-haproxy{cfg.shmPrefix.replace('/', '-')}"


def frontend_stats(cfg, timeout_s: float = 1.0) -> dict | None:
    """The client frontend's row of HAProxy's ``show stat`` (scur: connections now, slim: the
    limit, dcon: connections refused by the admission rule, ...), or None if HAProxy does not
    answer."""
    import socket
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(("\0" + stats_name(cfg)).ljust(108, "\0"))   # HAProxy pads abstract names to sun_path
            s.sendall(b"show stat\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    except OSError:
        return None
    lines = data.decode(errors="replace").splitlines()
    if not lines or not lines[0].startswith("# "):
        return None
    names = lines[0][2:].split(",")
    for line in lines[1:]:
        row = dict(zip(names, line.split(",")))
        if row.get("pxname") == "clients" and row.get("svname") == "FRONTEND":
            return row
    return None


def connections(row: dict) -> tuple[int, int, int]:
    """(refused so far, connections now, maxconn) from ``frontend_stats``' row."""
    return int(row.get("dcon") or 0), int(row.get("scur") or 0), int(row.get("slim") or 0)


def render(cfg) -> str:
    servers = "\n".join(f"    server reader-{i} 127.0.0.1:{cfg.reader_port(i)} check inter 1s downinter {DOWN_CHECK_MS}ms "
                        f"fall 1 rise 1 send-proxy-v2 check-send-proxy" for i in range(cfg.readerProcessNums))
    maxconn, pipes = fd_budget()
    return f"""# generated from {cfg.source} by rocketbox; edits are overwritten at the next start
global
    maxconn {maxconn}
    nbthread 1
    maxpipes {pipes}
    stats socket abns@{stats_name(cfg)} level user
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
    tcp-request connection reject if {{ fe_conn gt {admission_limit(maxconn)} }}
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
        self.refused, self.told_full = 0, False

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
        assert self.proc is not None             # (open started it)
        if os.environ.get("NOTIFY_SOCKET"):      # its unit is Type=notify: ready once a request through it is answered
            from rocketbox.net.readiness import answers, notify
            while self.proc.poll() is None and not self.stop_requested and \
                    not answers("127.0.0.1", self.cfg.listenPort, broker=True):
                time.sleep(0.2)
            notify("READY=1")
        while True:
            try:
                rc = self.proc.wait(WATCH_S)
                break
            except subprocess.TimeoutExpired:
                self._watch()
        if not self.stop_requested:
            log.error("haproxy exited with %d (its own message is above)", rc)
            raise SystemExit(1)

    def _watch(self) -> None:
        """Say once when clients are refused at the connection limit, and again only after the
        connections fell below 80% of it."""
        row = frontend_stats(self.cfg)
        if row is None:
            return
        refused, now, maxconn = connections(row)
        limit = admission_limit(maxconn)
        if refused > self.refused and not self.told_full:
            self.told_full = True
            log.warning("new client connections are refused: %d connections, the limit is %d (HAProxy's maxconn %d, "
                        "from the descriptor limit %d; raise LimitNOFILE / ulimit -n)", now, limit, maxconn,
                        resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        elif self.told_full and now < 0.8 * limit:
            self.told_full = False
            log.info("client connections below 80%% of the limit again (%d of %d)", now, limit)
        self.refused = refused

    def request_stop(self) -> None:
        self.stop_requested = True
        self.wake()

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
