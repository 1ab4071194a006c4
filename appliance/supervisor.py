"""The embedded supervisor (``appliance start``): owns the shared state and the role processes.

start: lock the store (``<root>/lock``), check that every port the roles listen on is free and that
HAProxy accepts its config (exit 2 naming the port and its holder if one stays busy for
``PORT_GRACE_S``, or what HAProxy lacks), create the shared segments
(replacing stale ones of a crashed run), run boot recovery, import every role's code, then fork
each role from itself (``children.py``; it runs what ``appliance run ROLE`` runs).
While running it watches the children and restarts one that dies (with a short back-off).
Once every role is up, a request through HAProxy and through each reader is answered and a name
server holds the broker's routes (reader 0 registered it), it prints one ``ready`` line on stdout
(address, store, roles); a produce after it finds the routes.  If that takes longer than ``READY_PATIENCE_S`` it says what it waits for.
On SIGTERM/SIGINT: mark ``stopping``, start again any role that is down (so the stop can finish),
stop roles in reverse start order (writer first: it drains its rings; then the dispatcher catches
up; then the flusher flushes, checkpoints and removes ``abort``), unlink the shared state, print one
``stopped`` line (cleanly, or what it could not do), exit 0 (1 if a role had to be killed).
"""
from __future__ import annotations

import datetime
import errno
import fcntl
import gc
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import psutil

from rocketbox import native
from rocketbox.appliance import children, recovery
from rocketbox.appliance.process import name_process
from rocketbox.appliance.roles import FINISH_STOP, listeners, pid_path, preload, roles_for
from rocketbox.net.client import split_addrs
from rocketbox.net.readiness import answers, notify
from rocketbox.shm import stats
from rocketbox.shm.layout import C
from rocketbox.shm.state import SharedState
from rocketbox.shm.tables import TableFull, table_use
from rocketbox.store.errors import StoreError
from rocketbox.store.topicconfig import QueueNumsOutOfRange

log = logging.getLogger("rocketbox.supervisor")
STOP_TIMEOUT_S = 60
RECORD_POSITION = {"dispatcher": (C.DISPATCHED, C.WRITTEN)}   # role -> (the record it is at, the end)
PORT_GRACE_S = 5            # how long a busy port may take to come free (a previous run still exiting)
READY_PATIENCE_S = 20       # past this without the ready line, start says what it still waits for


class CannotStart(Exception):
    """Something the roles need is taken or missing (a port, HAProxy): start exits 2 naming it."""


def check_ports(addresses: list[tuple[str, int, str]], grace_s: float = PORT_GRACE_S) -> None:
    """Bind each address as its role will (SO_REUSEADDR, so connections in TIME_WAIT do not count)
    and let it go; CannotStart naming the first one still busy after ``grace_s``, and who holds it."""
    deadline = time.monotonic() + grace_s
    for host, port, what in addresses:
        while True:
            try:
                with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind((host, port))
                    s.listen(1)
                break
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise CannotStart(f"cannot listen on {host}:{port} ({what}): {e.strerror}") from None
                if time.monotonic() >= deadline:
                    raise CannotStart(f"port {port} ({what}) is in use{_holder(port)}; stop that or "
                                    f"choose another port in broker.conf") from None
                time.sleep(0.2)


def _holder(port: int) -> str:
    """`` by pid N (name)`` for the process listening on ``port``, when this user may see it."""
    import psutil
    try:
        for c in psutil.net_connections("inet"):
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
                return f" by pid {c.pid} ({psutil.Process(c.pid).name()})"
    except (psutil.Error, OSError):
        pass
    return " by another process"


class Supervisor:
    def __init__(self, cfg, config_path: str | None, spawn: bool = True):
        """``spawn`` False: the store's keeper under systemd (``appliance run store``), which
        locks, creates and recovers as ``start`` does and unlinks at the stop, while systemd runs
        each role as a unit of its own (systemd/)."""
        self.cfg, self.config_path, self.spawn = cfg, config_path, spawn
        self.procs: dict[str, children.Child] = {}
        self.roles = roles_for(cfg)
        self.restarts: dict[str, list[float]] = {r: [] for r in self.roles}
        self.died_at: dict[str, int] = {}        # role -> the CommitLog offset it last died at
        self.stop_requested = False
        self.lock_fd = -1
        self.started_at, self.ready, self.told_waiting = 0.0, False, False
        self.failures: list[str] = []           # what the stop could not do, for its last line

    def _lock_store(self) -> None:
        for path, key in ((self.cfg.root, "storePathRootDir"), (self.cfg.commitlog_dir, "storePathCommitLog")):
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as e:
                raise CannotStart(f"cannot make the store directory {path} ({key}): {e.strerror}") from None
        self.lock_fd = os.open(os.path.join(self.cfg.root, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CannotStart(f"store {self.cfg.root} is locked by another running appliance") from None
        os.pwrite(self.lock_fd, b"lock", 0)

    def start(self) -> None:
        self._lock_store()
        check_ports(listeners(self.cfg, self.roles))
        if "haproxy" in self.roles:
            from rocketbox.haproxy import service as haproxy
            try:
                haproxy.configure(self.cfg)
            except haproxy.Unusable as e:
                raise CannotStart(str(e)) from None
        self.sh = SharedState(self.cfg.geometry()).create()
        self.sh.control[C.PID_SUPERVISOR] = os.getpid()
        os.makedirs(self.cfg.run_dir, exist_ok=True)
        with open(pid_path(self.cfg, "supervisor"), "w") as f:
            f.write(f"{os.getpid()}\n")
        write_store_info(self.cfg)
        try:
            report = recovery.recover(self.cfg, self.sh)
        except TableFull as e:           # the store holds more than broker.conf makes room for
            raise CannotStart(f"the store does not fit: {e}; raise it in {self.config_path or 'broker.conf'}") from None
        except QueueNumsOutOfRange as e:
            raise CannotStart(f"{e}; raise it in {self.config_path or 'broker.conf'}") from None
        except StoreError as e:          # a store file it cannot read: named, no traceback
            raise CannotStart(f"recovery cannot read the store: {e}") from None
        log.info("recovered (%s exit): CommitLog end %d, cut %d bytes, %d damaged spans quarantined, "
                 "re-dispatched from %d, %d queues", "abnormal" if report.abnormal else "normal", report.end_offset,
                 report.cut_bytes, report.damaged, report.redispatch_from, report.queues)
        log.info("hot paths: %s", native.describe())
        stats.start(self.sh, int(time.time() * 1000), datetime.date.today().toordinal())
        self.started_at = time.monotonic()
        if not self.spawn:
            notify("READY=1")                    # systemd may start the roles now
            return
        preload(self.roles)
        gc.freeze()                              # what is loaded now stays shared with the roles
        for role in self.roles:
            self._spawn(role)

    def _spawn(self, role: str) -> None:
        self.procs[role] = children.fork_role(role, self.cfg, self._leave)
        log.info("started %s (pid %d)", role, self.procs[role].pid)

    def _leave(self) -> None:
        """In a forked role: let go of what is the supervisor's alone (the lock stays held by the
        supervisor's descriptor; the role attaches the shared state itself)."""
        os.close(self.lock_fd)
        self.sh.close()

    def watch(self) -> None:
        """Restart roles that exit while we are not stopping; returns when a stop is requested."""
        while not self.stop_requested:
            for role, p in list(self.procs.items()):
                rc = p.poll()
                if rc is None:
                    continue
                now = time.monotonic()
                recent = [t for t in self.restarts[role] if now - t < 60] + [now]
                self.restarts[role] = recent
                delay = min(5.0, 0.2 * 2 ** (len(recent) - 1))
                log.error("%s exited with %s; restarting in %.1f s", role, rc, delay)
                self._same_record(role)
                time.sleep(delay)
                if not self.stop_requested:
                    self._spawn(role)
            stats.mark_day(self.sh, datetime.date.today().toordinal())
            if not self.ready and self.spawn:
                self._tell_ready()
            time.sleep(0.2)

    def _same_record(self, role: str) -> None:
        """A role that follows the CommitLog and dies twice at the same record, with records left to
        do, is a defect to report, not a restart loop to leave to itself: say so, naming the record."""
        if role not in RECORD_POSITION:
            return
        at, end = (int(self.sh.control[f]) for f in RECORD_POSITION[role])
        if at >= end:
            return
        if self.died_at.get(role) == at:
            log.critical("DEFECT: %s died twice on the record at CommitLog offset %d (its records up to %d are "
                         "waiting); report it with that record (appliance check names it)", role, at, end)
        self.died_at[role] = at

    def _waiting_for(self) -> list[str]:
        """What the appliance lacks to serve: roles not up, listeners not answering, no name
        server holding the broker's routes."""
        missing = [role for role, p in self.procs.items() if not self._started(role, p, 0)]
        for host, port, what in listeners(self.cfg, self.roles):
            broker = what.startswith(("HAProxy", "reader-"))        # the ports a remoting request is answered on
            if not answers("127.0.0.1" if host == "0.0.0.0" else host, port, broker):
                missing.append(f"{what.split(',')[0]} on port {port}")
        if split_addrs(self.cfg.namesrvAddr) and not self.sh.control[C.REGISTERED_MS]:
            missing.append(f"the registration with name server(s) {self.cfg.namesrvAddr}")
        return missing

    def _tell_ready(self) -> None:
        missing = self._waiting_for()
        if not missing:
            self.ready = True
            print(f"rocketbox ready: broker {self.cfg.brokerName} at {self.cfg.brokerIP1}:{self.cfg.listenPort}"
                  f" (name server {self.cfg.namesrvAddr or 'none'}), store {self.cfg.root},"
                  f" roles {' '.join(self.roles)}", flush=True)
            for t in table_use(self.sh.views, self.sh.control):
                if t.near_full:
                    print(f"rocketbox: {t.warning()}", flush=True)
        elif not self.told_waiting and time.monotonic() - self.started_at > READY_PATIENCE_S:
            self.told_waiting = True
            print(f"rocketbox not ready after {READY_PATIENCE_S} s: waiting for {', '.join(missing)}"
                  f" (the log says why)", flush=True)

    def _started(self, role: str, p: children.Child, timeout_s: float = 20) -> bool:
        """True once the role has written its pid file (its signal handlers are in place)."""
        deadline = time.monotonic() + timeout_s
        while p.poll() is None:
            try:
                with open(pid_path(self.cfg, role)) as f:
                    if f.read().strip() == str(p.pid):
                        return True
            except OSError:
                pass
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        return False

    def stop(self) -> int:
        self.sh.control[C.STOPPING] = 1
        for role in self.roles:     # a store role that is down (crashed, in back-off) finishes the stop too
            p = self.procs.get(role)
            if role in FINISH_STOP and p is not None and p.poll() is not None:
                log.error("%s exited with %s; starting it to finish the stop", role, p.returncode)
                self._spawn(role)
        for role in reversed(self.roles):
            p = self.procs.get(role)
            if p is None or p.poll() is not None:
                continue
            if not self._started(role, p):
                log.error("%s did not start within 20 s", role)
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.error("%s did not stop within %d s; killing it", role, STOP_TIMEOUT_S)
                p.kill()
                p.wait()
                self.failures.append(f"{role} was killed after {STOP_TIMEOUT_S} s")
                continue
            if p.returncode:
                self.failures.append(f"{role} exited with {p.returncode}")
        if not self.spawn:                       # systemd stopped the roles first; a live one would lose the segment
            for role in self.roles:
                pid = _pid_of(self.cfg, role)
                if pid is not None and psutil.pid_exists(pid):
                    self.failures.append(f"{role} (pid {pid}) was still running")
        if os.path.exists(os.path.join(self.cfg.root, "abort")):
            self.failures.append("the abort marker is still there (not everything was flushed or dispatched)")
        else:
            self._bury_found()
        written = int(self.sh.control[C.WRITTEN])
        self.sh.close()
        self.sh.unlink()
        for role in [*self.roles, "supervisor"]:
            try:
                os.unlink(pid_path(self.cfg, role))
            except FileNotFoundError:
                pass
        os.close(self.lock_fd)
        if self.failures:
            print(f"rocketbox stopped, not cleanly: {'; '.join(self.failures)} (recovery runs at the next start)",
                  flush=True)
            return 1
        print(f"rocketbox stopped cleanly: store {self.cfg.root} flushed and checkpointed, CommitLog end {written}",
              flush=True)
        return 0


    def _bury_found(self) -> None:
        """Damage the readers or the scrub found while running becomes the tombstone recovery would
        make, now that no role runs (``recovery.bury_found``)."""
        try:
            n = recovery.bury_found(self.cfg)
        except (StoreError, OSError) as e:
            log.error("damage found while running stays as it is until the next start: %s", e)
            return
        if n:
            log.warning("%d damaged span(s) found while running replaced by tombstones (appliance quarantine)", n)


def _pid_of(cfg, role: str) -> int | None:
    try:
        with open(pid_path(cfg, role)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def mark_stopping(cfg, timeout_s: float = 5.0) -> int:
    """``appliance stopping``: ask the store's keeper (SIGUSR1) to mark the coming stop as the
    whole appliance's, so the roles systemd stops next finish it (flush, checkpoint, abort marker
    removed) rather than expect a restart; the keeper alone writes the flag."""
    pid = _pid_of(cfg, "supervisor")
    if pid is None or not psutil.pid_exists(pid):
        print(f"appliance stopping: no store keeper runs for {cfg.root}", file=sys.stderr)
        return 1
    os.kill(pid, signal.SIGUSR1)
    sh = SharedState(cfg.geometry()).attach()
    try:
        deadline = time.monotonic() + timeout_s
        while not sh.control[C.STOPPING]:
            if time.monotonic() > deadline:
                print(f"appliance stopping: the keeper (pid {pid}) did not mark the stop in {timeout_s:.0f} s",
                      file=sys.stderr)
                return 1
            time.sleep(0.02)
    finally:
        sh.close()
    print(f"the stop of {cfg.root} is marked: the roles stopped next finish it")
    return 0


def run(cfg, config_path: str | None, spawn: bool = True) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s supervisor[%(process)d] %(levelname)s %(message)s")
    name_process("supervisor")
    sup = Supervisor(cfg, config_path, spawn)

    def on_signal(_sig, _frm):
        sup.stop_requested = True

    def on_stopping(_sig, _frm):
        if getattr(sup, "sh", None) is not None:
            sup.sh.control[C.STOPPING] = 1

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if not spawn:
        signal.signal(signal.SIGUSR1, on_stopping)
    try:
        sup.start()
    except CannotStart as e:
        if getattr(sup, "sh", None) is not None:
            sup.sh.close()
            sup.sh.unlink()
        if sup.lock_fd >= 0:
            os.close(sup.lock_fd)
        print(f"appliance: {e}", file=sys.stderr)
        return 2
    except BaseException:
        if getattr(sup, "sh", None) is not None:
            sup.sh.close()
            sup.sh.unlink()
        raise
    sup.watch()
    return sup.stop()


def write_store_info(cfg) -> None:
    """``run/store.json``: what a job reading the store's files needs to know of them
    (``spark/storefiles.py``): where the CommitLog is, its file size, the flush mode, the IndexFile's."""
    os.makedirs(cfg.run_dir, exist_ok=True)
    with open(os.path.join(cfg.run_dir, "store.json"), "w") as f:
        json.dump({"flushDiskType": cfg.flushDiskType, "brokerName": cfg.brokerName,
                   "storePathCommitLog": cfg.commitlog_dir, "mappedFileSizeCommitLog": cfg.mappedFileSizeCommitLog,
                   "maxHashSlotNum": cfg.maxHashSlotNum, "maxIndexNum": cfg.maxIndexNum}, f)
