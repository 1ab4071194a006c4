"""A POSIX shared-memory segment mapped into this process.

One owner (the supervisor) creates and unlinks; every role attaches and closes.  Nothing relies
on garbage collection: ``close`` unmaps, ``unlink`` removes the name.
"""
from __future__ import annotations

import mmap

import numpy as np
import posix_ipc


class Segment:
    def __init__(self, name: str, size: int):
        self.name, self.size = name, size
        self.mm: mmap.mmap | None = None
        self.buf: np.ndarray = None  # type: ignore[assignment]   # uint8 view of the whole segment, once mapped

    def create(self) -> "Segment":
        """Owner only: create fresh (a stale one of the same name is replaced), zero-filled."""
        try:
            posix_ipc.unlink_shared_memory(self.name)
        except posix_ipc.ExistentialError:
            pass
        shm = posix_ipc.SharedMemory(self.name, posix_ipc.O_CREX, mode=0o600, size=self.size)
        return self._map(shm)

    def attach(self) -> "Segment":
        shm = posix_ipc.SharedMemory(self.name)
        if shm.size < self.size:
            shm.close_fd()
            raise RuntimeError(f"shared memory {self.name} is {shm.size} bytes, expected {self.size}")
        return self._map(shm)

    def _map(self, shm) -> "Segment":
        try:
            self.mm = mmap.mmap(shm.fd, self.size)
        finally:
            shm.close_fd()
        self.buf = np.frombuffer(self.mm, dtype=np.uint8)
        return self

    def close(self) -> None:
        self.buf = None  # type: ignore[assignment]
        if self.mm is not None:
            try:
                self.mm.close()
            except BufferError:   # a view is still held; the mapping goes with it
                pass
            self.mm = None

    def unlink(self) -> None:
        try:
            posix_ipc.unlink_shared_memory(self.name)
        except posix_ipc.ExistentialError:
            pass
