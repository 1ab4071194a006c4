"""Warm-ahead: the CommitLog's page cache brought in ahead of the writer, off its path.

The writer appends with ``pwrite`` (docs/ARCHITECTURE.md, "How the writer writes the CommitLog"),
so each fresh 4 KiB of CommitLog costs it a page-cache page.  Where that page comes from memory
the kernel has long had free, it is dear: on this project's VM, whose free memory is reported to
the host (virtio-balloon free page reporting), ~10 µs a page, ~2.5 s of the writer's CPU per GiB,
against ~0.1-0.25 s for a page recycled from recently freed memory.  The writer is the one
serial stage every send waits for, so that cost is paid in throughput and latency.

This thread, in the flusher's process, keeps the CommitLog ``commitLogWarmAheadMb`` ahead of
``written`` in the page cache: it asks the kernel to read ahead there (``POSIX_FADV_WILLNEED``,
128 KiB a call, within any device's ``read_ahead_kb`` cap), which allocates the pages in this
thread -- the dear part -- and fills them with zeros without I/O (the files are fallocated, their
blocks unwritten), before the writer gets there.  The cost moves, it does not vanish, but onto a
stage no send waits for, niced so that every stage a send does wait for goes first.  (A ``pread``
into a buffer did the same, but each call held a CPU for the whole of its faults and the paced
send latency's p99 rose; the read-ahead call does not wait for the pages to be filled.)  It only
ever reads: a read-ahead racing the writer's ``pwrite`` of the same page yields zeros or the new
bytes to nobody but the page cache, and changes neither the file nor what anyone reads.  It warms
only files that exist (the writer creates them); the next file as soon as the writer has made it.
RocketMQ's ``warmMapedFileEnable`` is the same idea done once per file at its creation (zeros
written and flushed through the whole file).
"""
from __future__ import annotations

import logging
import os
import threading

from shm.layout import C
from store.mappedfile import offset_to_name

log = logging.getLogger("rocketbox.flusher")
CHUNK = 128 << 10          # bytes per read-ahead call (Linux's default read_ahead_kb)
NICE = 19                  # yields the CPU to every stage a send waits for
BUSY_S, IDLE_S = 0.02, 0.2  # between rounds: after warming something / after nothing to do


class WarmAhead:
    def __init__(self, cfg, control):
        self.dir, self.fsize, self.ctl = cfg.commitlog_dir, cfg.mappedFileSizeCommitLog, control
        self.ahead = cfg.commitLogWarmAheadMb << 20
        self.warmed = 0                        # the CommitLog is in the page cache up to here
        self.fd, self.fd_start = -1, -1        # the file being warmed
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="warm-ahead", daemon=True)

    def start(self) -> "WarmAhead":
        if self.ahead:
            self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def step(self) -> int:
        """Warm up to ``written + ahead`` (as far as the files exist).  -> bytes warmed."""
        written = int(self.ctl[C.WRITTEN])
        self.warmed = max(self.warmed, written - written % 4096)
        target, done = written + self.ahead, 0
        while self.warmed < target and not self.stopping.is_set():
            start = self.warmed - self.warmed % self.fsize
            if start != self.fd_start and not self._open(start):
                break
            n = min(CHUNK, start + self.fsize - self.warmed, target - self.warmed)
            os.posix_fadvise(self.fd, self.warmed - start, n, os.POSIX_FADV_WILLNEED)
            self.warmed += n
            done += n
        return done

    def _open(self, start: int) -> bool:
        try:
            fd = os.open(os.path.join(self.dir, offset_to_name(start)), os.O_RDONLY)
        except FileNotFoundError:
            return False                       # not created yet: warmed once the writer has
        if self.fd >= 0:
            os.close(self.fd)
        self.fd, self.fd_start = fd, start
        return True

    def _run(self) -> None:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)   # this thread only
        try:
            while not self.stopping.wait(BUSY_S if self.step() else IDLE_S):
                pass
        except OSError as e:                   # a convenience, not durability: say so, stop warming
            log.warning("warm-ahead stopped, the writer pays its own page cache from now on: %s", e)
