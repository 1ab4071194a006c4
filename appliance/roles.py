"""The role table: what ``appliance run ROLE`` runs, and in which order the supervisor starts and
stops them.  The same entry point serves systemd units and the embedded supervisor.

Each role process: load config, attach the shared state, ``open`` its service, loop ``run`` until
SIGTERM/SIGINT (which set the stop flag and post the role's own waker), ``close``, exit 0.

Under the embedded supervisor (``ROCKETBOX_SUPERVISOR`` = its pid), which forks the roles
(``children.py``), a role ignores SIGINT — a Ctrl-C reaches the whole terminal process group, and
the stop must go role by role in the supervisor's order — and asks the kernel for SIGTERM if the
supervisor dies, so no role outlives it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import logging
import os
import resource
import signal
import sys
from typing import Any

from rocketbox.appliance import host
from rocketbox.appliance.process import name_process
from rocketbox.store.errors import StoreError

# role -> its service: a class (cfg, shared state[, index]) -> a LoopRole or ServerRole (open, run,
# close, request_stop), named by module so that a role's code loads only in its own process (or,
# under ``appliance start``, once in the supervisor, which forks the roles). In start order; stop
# order is the reverse (HAProxy first so no new clients arrive, then the readers, whose sends the
# writer still answers; writer before dispatcher and flusher, so they see the end; name server
# last). A new role is its package and one line here.
ROLES = {"nameserver": "rocketbox.nameserver.service:NameServer",
         "flusher": "rocketbox.flusher.service:FlusherService",
         "dispatcher": "rocketbox.dispatcher.service:DispatcherService",
         "writer": "rocketbox.writer.service:WriterService",
         "replicator": "rocketbox.replicator.service:ReplicatorService",
         "cleaner": "rocketbox.cleaner.service:CleanerService",
         "scheduler": "rocketbox.scheduler.service:SchedulerService",
         "reader": "rocketbox.readers.service:ReaderService",
         "haproxy": "rocketbox.haproxy.service:HaproxyService",
         "grpc": "rocketbox.grpcfront.service:GrpcFront",
         "metrics": "rocketbox.metrics.service:MetricsService"}
INDEXED = {"reader"}                       # run as reader-0 .. reader-<readerProcessNums - 1>
NO_STORE = {"nameserver", "haproxy"}       # roles that do not attach the store's shared memory
FINISH_STOP = {"flusher", "dispatcher", "writer"}   # restarted during a stop if down: they finish it


def make_service(base: str, cfg, sh, index: int | None):
    """The service of role ``base``: its class from the table, imported now, given the config, the
    shared state (roles in ``NO_STORE`` take none) and the reader's index; the name server its
    address (the first of ``namesrvAddr``) and its KV config's path."""
    args: list[Any] = [cfg] if base in NO_STORE else [cfg, sh]
    if index is not None:
        args.append(index)
    if base == "nameserver":
        args = [*nameserver_address(cfg), cfg.kv_config_path]
    module, _, name = ROLES[base].partition(":")
    return getattr(importlib.import_module(module), name)(*args)


def preload(roles: list[str]) -> None:
    """Import the code of ``roles`` now: the supervisor does it once before it forks them."""
    for role in roles:
        importlib.import_module(ROLES[role.partition("-")[0]].partition(":")[0])
    importlib.import_module("rocketbox.shm.state")


def split_role(cfg, name: str) -> tuple[str, int | None]:
    """``reader-1`` -> ("reader", 1); ``writer`` -> ("writer", None); ValueError naming the problem."""
    base, _, index = name.partition("-")
    if base not in ROLES:
        raise ValueError(f"unknown role '{name}' (roles: {', '.join(roles_for(cfg))})")
    if base in INDEXED:
        if not index.isdigit() or int(index) >= cfg.readerProcessNums:
            raise ValueError(f"role '{name}': expected {base}-<0..{cfg.readerProcessNums - 1}> (readerProcessNums)")
        return base, int(index)
    if index:
        raise ValueError(f"unknown role '{name}'")
    return base, None


def nameserver_address(cfg) -> tuple[str, int]:
    """The first address of ``namesrvAddr``."""
    from rocketbox.net.client import split_addr, split_addrs
    return split_addr(split_addrs(cfg.namesrvAddr)[0])


def roles_for(cfg) -> list[str]:
    """What ``appliance start`` runs, in start order: a name server when the first address in
    ``namesrvAddr`` is on this host (unless ``startNameServer`` is false), the store roles, the
    readers, HAProxy; the replicator (a master's HA service, a slave's copy of its master); the
    scheduler (delayed messages, transaction checks) on a master only, as RocketMQ's."""
    scheduler = [] if cfg.slave else ["scheduler"]
    metrics = ["metrics"] if cfg.metricsPort else []
    grpc = ["grpc"] if cfg.grpcListenPort and not cfg.slave else []
    out = ["flusher", "dispatcher", "writer", "replicator", "cleaner", *scheduler,
           *(f"reader-{i}" for i in range(cfg.readerProcessNums)), "haproxy", *grpc, *metrics]
    from rocketbox.net.client import split_addrs
    if cfg.startNameServer and split_addrs(cfg.namesrvAddr):
        import psutil
        host = nameserver_address(cfg)[0]
        local = {"localhost", "0.0.0.0", cfg.brokerIP1} | {a.address for addrs in psutil.net_if_addrs().values()
                                                         for a in addrs}
        if host in local:
            out.insert(0, "nameserver")
    return out


def listeners(cfg, roles: list[str]) -> list[tuple[str, int, str]]:
    """The TCP addresses ``roles`` listen on: (host, port, what binds it and which key sets it)."""
    out = []
    for role in roles:
        base, index = split_role(cfg, role)
        if base == "haproxy":
            out += [("0.0.0.0", cfg.listenPort, "HAProxy, listenPort"),
                    ("0.0.0.0", cfg.listenPort - 2, "HAProxy's VIP port, listenPort - 2")]
        elif base == "reader":
            out.append(("127.0.0.1", cfg.reader_port(index),
                        f"{role}, readerPortBase (0: listenPort + 20) + {index}"))
        elif base == "nameserver":
            out.append((*nameserver_address(cfg), "the name server, namesrvAddr's first address"))
        elif base == "metrics":
            out.append(("0.0.0.0", cfg.metricsPort, "the metrics role's /metrics, metricsPort"))
        elif base == "grpc":
            out.append(("0.0.0.0", cfg.grpcListenPort, "the gRPC front (RocketMQ 5.x clients), grpcListenPort"))
        elif base == "replicator" and not cfg.slave:
            out.append(("0.0.0.0", cfg.listenPort + 1, "the HA service, listenPort + 1"))
    return out


SUPERVISED_ENV = "ROCKETBOX_SUPERVISOR"
_PR_SET_PDEATHSIG = 1


def pid_path(cfg, role: str) -> str:
    return os.path.join(cfg.run_dir, f"{role}.pid")


def raise_open_files_limit() -> int:
    """The soft limit of open files raised to the hard one, for this process and the roles it
    starts: a reader holds a descriptor per client connection, and a login shell's soft limit
    (1024 on Debian) would stop it near 1,000 clients, silently (HAProxy sets its own).  -> the
    limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)    # (Linux caps the hard one at fs.nr_open)
    if 0 <= soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def run_role(role: str, cfg) -> int:
    try:
        base, index = split_role(cfg, role)
    except ValueError as e:
        print(f"appliance: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {role}[%(process)d] %(levelname)s %(message)s")
    name_process(role)
    host.disable_thp()
    if base in NO_STORE:
        sh = None
    else:
        from rocketbox.shm.state import SharedState  # (numpy: not loaded by the roles without a store)
        sh = SharedState(cfg.geometry()).attach()
    service = make_service(base, cfg, sh, index)

    def stop(_sig, _frm):
        service.request_stop()

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
        try:
            service.open()
        except StoreError as e:              # a file it needs is unreadable: say which, no traceback
            logging.getLogger("rocketbox").error("cannot start %s: %s", role, e)
            return 2
        try:
            service.run()
        finally:
            service.close()
    finally:
        if sh is not None:
            sh.close()
        # done: a later SIGTERM (the supervisor's, after the process group's own) must not kill the
        # interpreter's exit, where Python resets its handlers to the default, and read as a crash
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return 0
