"""The roles' processes under the embedded supervisor (``appliance start``): forked from it, not
started anew.

The supervisor imports the code of every role it runs once (``roles.preload``) and forks each
role from itself, so a role starts with its code loaded: no interpreter to start and no imports,
about a quarter of a CPU second a role, which a start and every restart after a crash waited on
(docs/ARCHITECTURE.md). Under systemd each role is a unit of its own and runs
``appliance run ROLE`` as before; both end in ``roles.run_role``.

A forked role first gives up what is the supervisor's: its signal handlers, its log handlers and
what ``leave`` closes (the store lock's descriptor, its mapping of the shared state). It names
itself ``rbx-ROLE`` (``process.name_process``), runs ``run_role`` and ends with ``os._exit``: it
never returns into the supervisor's code nor runs its exit handlers.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable

from rocketbox.appliance.roles import SUPERVISED_ENV, run_role


class Child:
    """A forked role as the supervisor watches it: what it uses of ``subprocess.Popen``."""

    def __init__(self, pid: int, role: str) -> None:
        self.pid, self.role = pid, role
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code once the role has exited (-N: killed by signal N), else None."""
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit code, waiting up to ``timeout`` seconds (``subprocess.TimeoutExpired`` after)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (rc := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"rbx-{self.role}", timeout or 0)
            time.sleep(0.02)
        return rc

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:         # not a pid the kernel may have given to another process since
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_role(role: str, cfg, leave: Callable[[], None]) -> Child:
    """Fork ``role`` from this process, which has its code loaded; ``leave`` runs first in the
    child and closes what is the supervisor's alone."""
    supervisor = os.getpid()
    sys.stdout.flush()                  # else what is buffered would be written twice
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return Child(pid, role)
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)   # run_role sets its own once it can stop
        signal.signal(signal.SIGINT, signal.SIG_IGN)    # the stop goes role by role (run_role)
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        leave()
        logging.root.handlers.clear()                   # run_role's format names the role
        os.environ[SUPERVISED_ENV] = str(supervisor)
        code = run_role(role, cfg)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
