"""The appliance a benchmark runs against: its broker.conf in a fresh temp dir, ``appliance
start`` as a child process (log in the temp dir), up when ``appliance status`` says every role is,
and stopped with SIGTERM (the temp dir removed).  A start that fails halfway stops what it began."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import psutil

from rocketbox.appliance import config
from rocketbox.appliance.process import COMM_PREFIX

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class BenchAppliance:
    def __init__(self, prefix: str, base: str | None, settings: dict):
        self.dir = tempfile.mkdtemp(prefix=prefix, dir=base)
        self.conf = os.path.join(self.dir, "broker.conf")
        self.log_path = os.path.join(self.dir, "appliance.log")
        if "listenPort" in settings:         # the metrics role's port beside the broker's, not 5557 for every run
            settings = {"metricsPort": int(settings["listenPort"]) + 31, **settings}
        settings = {"grpcListenPort": 0, **settings}     # (no gRPC front unless a bench asks for one)
        with open(self.conf, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in {"storePathRootDir": f"{self.dir}/store", **settings}.items())
        self.proc: subprocess.Popen | None = None

    def start(self, ready=None, timeout: float = 30) -> "BenchAppliance":
        """Start and wait until every role is up, then for ``ready()`` if given (e.g. ports)."""
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "rocketbox.appliance", "start", "-c", self.conf], cwd=ROOT,
                                         stdout=log, stderr=subprocess.STDOUT, preexec_fn=_stop_with_parent)
        try:
            deadline = time.monotonic() + timeout
            while subprocess.run([sys.executable, "-m", "rocketbox.appliance", "status", "-c", self.conf], cwd=ROOT,
                                 capture_output=True).returncode != 0:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the appliance exited with {self.proc.returncode} (log: {self.log_path})")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the appliance is not up after {timeout} s (log: {self.log_path})")
                time.sleep(0.2)
            if ready is not None:
                ready()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_serving(self) -> None:
        """Until every reader and HAProxy accept connections, and HAProxy has had time to mark the
        readers up (it checks each every 1 s): what clients need before their first request
        (``appliance status`` says only that every role's process runs)."""
        cfg = config.load(self.conf)
        for i in range(cfg.readerProcessNums):
            wait_port(cfg.reader_port(i), self.proc, f"reader {i}")
        wait_port(cfg.listenPort, self.proc, "HAProxy")
        time.sleep(2.5)

    def _by_role(self, measure) -> dict[str, float]:
        """``measure(process)`` summed by role name, the supervisor's own too; a role's own
        children count as the role (the ``haproxy`` binary under its role)."""
        sup = psutil.Process(self.proc.pid)
        out = {"supervisor": measure(sup)}
        for p in sup.children(recursive=True):
            try:
                role = p.name().removeprefix(COMM_PREFIX)      # a role's (process_name), or haproxy's
                out[role] = out.get(role, 0) + measure(p)
            except (psutil.Error, OSError, IndexError):
                pass            # gone meanwhile, or no command line to name it by
        return out

    def role_cpu(self) -> dict[str, float]:
        """CPU seconds so far (user + system) of each role."""
        return self._by_role(lambda p: sum(p.cpu_times()[:2]))

    def role_memory(self) -> dict[str, tuple[int, int]]:
        """Each role's anonymous memory in KiB (its heap: file pages it maps, the store's and
        shared memory's, are not counted) and its open file descriptors."""
        anon = self._by_role(_anon_kib)
        fds = self._by_role(lambda p: p.num_fds())
        return {role: (anon[role], fds.get(role, 0)) for role in anon}

    def halt(self) -> None:
        """A clean stop that keeps the store (a restart follows)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(120)

    def stop(self) -> None:
        self.halt()
        shutil.rmtree(self.dir, ignore_errors=True)


def _stop_with_parent() -> None:
    """In the appliance's process, before it runs: SIGTERM (a clean stop) when the benchmark that
    started it dies, as when a test's time-out kills it with -9; else the appliance outlived it,
    holding its ports (the next run could not start) and its temp dir's broker.conf gone."""
    ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG


def _anon_kib(p: psutil.Process) -> int:
    with open(f"/proc/{p.pid}/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Anonymous:"))


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 30) -> None:
    """Until something accepts connections on 127.0.0.1:``port``; RuntimeError if ``proc`` (what
    should be listening there) exits first, TimeoutError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{what} is not listening on {port} after {timeout} s")
