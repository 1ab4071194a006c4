"""Blocking wake-ups between processes: named POSIX semaphores.

A process with nothing to do blocks in ``wait`` and uses no CPU.  ``post`` is cheap and may be
called more often than needed; ``wait`` swallows the surplus so a burst of posts costs one wake.
Created and unlinked by the supervisor; roles open by name.  SIGTERM handlers post the role's own
semaphore so a stop request wakes it at once.
"""
from __future__ import annotations

import posix_ipc


class Waker:
    def __init__(self, name: str):
        self.name = name
        self.sem: posix_ipc.Semaphore | None = None

    def create(self) -> "Waker":
        self.unlink()
        self.sem = posix_ipc.Semaphore(self.name, posix_ipc.O_CREX, mode=0o600, initial_value=0)
        return self

    def attach(self) -> "Waker":
        self.sem = posix_ipc.Semaphore(self.name)
        return self

    def post(self) -> None:
        # cap the count: a waiter needs to know "something happened", not how often
        if self.sem.value < 2:
            self.sem.release()

    def wait(self, timeout: float | None) -> bool:
        """Block until posted or ``timeout`` seconds pass; True when posted."""
        try:
            self.sem.acquire(timeout)
        except posix_ipc.BusyError:
            return False
        except posix_ipc.SignalError:
            return True
        while True:   # drain surplus posts
            try:
                self.sem.acquire(0)
            except (posix_ipc.BusyError, posix_ipc.SignalError):
                return True

    def close(self) -> None:
        if self.sem is not None:
            self.sem.close()
            self.sem = None

    def unlink(self) -> None:
        try:
            posix_ipc.unlink_semaphore(self.name)
        except posix_ipc.ExistentialError:
            pass
