"""Blocking wake-ups between processes: named POSIX semaphores, and named pipes for event loops.

A process with nothing to do blocks in ``wait`` and uses no CPU.  ``post`` is cheap and may be
called more often than needed; ``wait`` swallows the surplus so a burst of posts costs one wake.
Created and unlinked by the supervisor; roles open by name.  SIGTERM handlers post the role's own
semaphore so a stop request wakes it at once.

``Waker`` (a semaphore) serves the blocking roles: writer, dispatcher, flusher.  ``PipeWaker`` (a
FIFO in /dev/shm) serves the producer slots, whose owners are mostly event loops: its descriptor
goes straight into the loop's epoll (``fileno``/``drain``), so a wake costs no thread, no GIL
hand-over and no second wake-up of the loop; ``wait`` still blocks for tools and tests.
"""
from __future__ import annotations

import os
import select

import posix_ipc


class Waker:
    def __init__(self, name: str):
        self.name = name
        self.sem: posix_ipc.Semaphore = None  # type: ignore[assignment]   # until create or attach

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


class PipeWaker:
    """The same contract as ``Waker`` over a named pipe: ``post`` writes a byte (a full pipe is
    already a pending wake), ``wait``/``drain`` read everything pending.  Every party opens the
    FIFO read-write and non-blocking, which on Linux never blocks and keeps it usable whoever
    comes and goes."""

    def __init__(self, name: str):
        self.name, self.path = name, "/dev/shm/" + name.lstrip("/")
        self.fd = -1

    def create(self) -> "PipeWaker":
        self.unlink()
        os.mkfifo(self.path, 0o600)
        return self.attach()

    def attach(self) -> "PipeWaker":
        self.fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        return self

    def fileno(self) -> int:
        return self.fd

    def post(self) -> None:
        try:
            os.write(self.fd, b"\0")
        except BlockingIOError:
            pass

    def drain(self) -> bool:
        """Read every pending post; True if there was one.  A short read has emptied the pipe, so
        the usual wake costs one read, not a second one failing with EAGAIN."""
        got = False
        try:
            while True:
                n = len(os.read(self.fd, 4096))
                got = got or n > 0
                if n < 4096:
                    return got
        except BlockingIOError:
            return got

    def wait(self, timeout: float | None) -> bool:
        """Block until posted or ``timeout`` seconds pass; True when posted."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        return bool(ready) and self.drain()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
