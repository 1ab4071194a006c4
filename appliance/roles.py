"""The role table: what ``appliance run ROLE`` runs, and in which order the supervisor starts and
stops them.  The same entry point serves systemd units and the embedded supervisor.

Each role process: load config, attach the shared state, ``open`` its service, loop ``run`` until
SIGTERM/SIGINT (which set the stop flag and post the role's own waker), ``close``, exit 0.

Under the embedded supervisor (``ROCKETBOX_SUPERVISOR`` = its pid) a role ignores SIGINT — a
Ctrl-C reaches the whole terminal process group, and the stop must go role by role in the
supervisor's order — and asks the kernel for SIGTERM if the supervisor dies, so no role outlives it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import sys

from appliance import config as config_mod
from shm.state import SharedState


def _writer(cfg, sh):
    from writer.service import WriterService
    return WriterService(cfg, sh), sh.writer_waker.post


def _dispatcher(cfg, sh):
    from dispatcher.service import DispatcherService
    return DispatcherService(cfg, sh), sh.dispatcher_waker.post


def _flusher(cfg, sh):
    from flusher.service import FlusherService
    return FlusherService(cfg, sh), sh.flusher_waker.post


def _nameserver(cfg, _sh):
    from nameserver.service import NameServer
    host, port = nameserver_address(cfg)
    ns = NameServer(host, port)
    return ns, ns.wake


# role -> factory(cfg, shared state or None) -> (service, wake); in start order, stop order is the
# reverse (writer first, so dispatcher and flusher see the end; the name server last)
ROLES = {"nameserver": _nameserver, "flusher": _flusher, "dispatcher": _dispatcher, "writer": _writer}
NO_STORE = {"nameserver"}                  # roles that do not attach the store's shared memory


def nameserver_address(cfg) -> tuple[str, int]:
    """The first address of ``namesrvAddr``."""
    first = cfg.namesrvAddr.split(";")[0].strip()
    host, _, port = first.rpartition(":")
    return host, int(port)


def roles_for(cfg) -> list[str]:
    """What ``appliance start`` runs: the store roles, and a name server when the first address
    in ``namesrvAddr`` is on this host."""
    out = [r for r in ROLES if r not in NO_STORE]
    if cfg.namesrvAddr.strip():
        import psutil
        host = nameserver_address(cfg)[0]
        local = {"localhost", "0.0.0.0", cfg.brokerIP1} | {a.address for addrs in psutil.net_if_addrs().values()
                                                         for a in addrs}
        if host in local:
            out.insert(0, "nameserver")
    return out


SUPERVISED_ENV = "ROCKETBOX_SUPERVISOR"
_PR_SET_PDEATHSIG = 1


def pid_path(cfg, role: str) -> str:
    return os.path.join(cfg.run_dir, f"{role}.pid")


def run_role(role: str, cfg) -> int:
    if role not in ROLES:
        print(f"appliance: unknown role '{role}' (roles: {', '.join(ROLES)})", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {role}[%(process)d] %(levelname)s %(message)s")
    sh = None if role in NO_STORE else SharedState(cfg.geometry()).attach()
    service, wake = ROLES[role](cfg, sh)

    def stop(_sig, _frm):
        service.stop_requested = True
        wake()

    signal.signal(signal.SIGTERM, stop)
    supervisor = int(os.environ.get(SUPERVISED_ENV, "0"))
    if supervisor:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != supervisor:             # it died before the prctl took effect
            stop(None, None)
    else:
        signal.signal(signal.SIGINT, stop)
    os.makedirs(cfg.run_dir, exist_ok=True)
    with open(pid_path(cfg, role), "w") as f:
        f.write(f"{os.getpid()}\n")
    try:
        service.open()
        try:
            service.run()
        finally:
            service.close()
    finally:
        if sh is not None:
            sh.close()
    return 0
