"""The flusher: durability.  Sole writer of ``flushed``, the ``checkpoint`` file and ``abort``.

SYNC_FLUSH is group commit: woken by the writer after each commit, it takes ``written`` as it is,
fdatasyncs the CommitLog files up to there once, publishes ``flushed`` and posts every slot whose
``flush_wait`` is now covered -- all waiters of all batches appended meanwhile are released by
that one flush.  ASYNC_FLUSH flushes every ``flushIntervalCommitLog`` ms when at least
``flushCommitLogLeastPages`` pages are dirty (or ``flushCommitLogThoroughInterval`` has passed),
and at once when some slot waits.  Consume queues and the index are flushed every
``flushIntervalConsumeQueue`` ms, then the checkpoint is written.

A failed fdatasync raises out of ``step`` and ends the process (the supervisor restarts it and
recovery takes over); it is never logged and ignored.
"""
from __future__ import annotations

import logging
import os
import time

import numpy as np

from rocketbox.shm.histogram import Histogram
from rocketbox.shm.layout import C, H, S
from rocketbox.shm.role import LoopRole
from rocketbox.store import indexfile
from rocketbox.store.checkpoint import Checkpoint
from rocketbox.store.consumequeue import ENTRY_SIZE, file_size_for, queue_dir
from rocketbox.store.errors import no_space
from rocketbox.store.mappedfile import fdatasync, offset_to_name, syncfs

log = logging.getLogger("rocketbox.flusher")
PAGE = 4096
MANY_DIRTY_QUEUES = 64      # more consume queues written since the last flush: one syncfs, not an fdatasync each


class FlusherService(LoopRole):
    def __init__(self, cfg, shared):
        super().__init__(log, "the checkpoint waits")
        self.cfg, self.sh, self.ctl = cfg, shared, shared.control
        self.waker = shared.flusher_waker
        self.fsize = cfg.mappedFileSizeCommitLog
        self.slave = cfg.slave
        self.cq_file_size = file_size_for(cfg.mappedFileSizeConsumeQueue)
        self.checkpoint = Checkpoint(os.path.join(cfg.root, "checkpoint"))
        self.abort_path = os.path.join(cfg.root, "abort")
        self.last_thorough = self.last_cq = time.monotonic()
        self.cq_flushed = None
        self.flush_count = 0
        self.latency = Histogram(shared.views, H.FLUSH_LATENCY)

    def open(self) -> "FlusherService":
        self.checkpoint.load()
        with open(self.abort_path, "wb"):
            pass
        self.cq_flushed = self.sh.views["queue_max"].copy()
        self.ctl[C.PID_FLUSHER] = os.getpid()
        return self

    def close(self) -> None:
        """Final flush of everything; ``abort`` goes only when dispatch has caught up."""
        self.flush_commitlog(force=True)
        self.flush_logics(force=True)
        # (a slave's CommitLog may end inside a record, which a clean stop leaves undispatched and
        # the next start cuts: the dispatcher having stopped cleanly is enough there)
        dispatched = self.ctl[C.DISPATCHED] >= self.ctl[C.WRITTEN] or self.slave and not self.ctl[C.PID_DISPATCHER]
        if dispatched and self.ctl[C.FLUSHED] >= self.ctl[C.WRITTEN]:
            if os.path.exists(self.abort_path):
                os.unlink(self.abort_path)
        self.ctl[C.PID_FLUSHER] = 0

    # ------------------------------------------------------------ CommitLog
    def _waiters(self) -> np.ndarray:
        return self.sh.slots[:, S.FLUSH_WAIT]

    def flush_commitlog(self, force: bool) -> bool:
        # read before 'written': never newer than the data (a slave's writer does not stamp; the
        # store time of what its dispatcher has read is the checkpoint's, as 4.9.8's slave)
        ts = int(self.ctl[C.DISPATCHED_TS if self.slave else C.WRITTEN_TS])
        written, flushed = int(self.ctl[C.WRITTEN]), int(self.ctl[C.FLUSHED])
        if written <= flushed:
            return False
        if not force:
            dirty_pages = written // PAGE - flushed // PAGE
            thorough = time.monotonic() - self.last_thorough >= self.cfg.flushCommitLogThoroughInterval / 1000
            waiting = bool((self._waiters() > flushed).any())
            if dirty_pages < self.cfg.flushCommitLogLeastPages and not thorough and not waiting:
                return False
        start, began = flushed - flushed % self.fsize, time.monotonic_ns()
        for file_start in range(start, written, self.fsize):
            try:
                fdatasync(os.path.join(self.cfg.commitlog_dir, offset_to_name(file_start)))
            except FileNotFoundError:
                if self.slave and file_start < self._first_file():
                    continue                 # (a slave whose CommitLog starts where its master's last file did)
                raise
        self.latency.observe((time.monotonic_ns() - began) // 1000)
        self.ctl[C.FLUSHED] = written
        self.checkpoint.physic_ts, self.checkpoint.physic_offset = ts, written
        self.last_thorough = time.monotonic()
        self.flush_count += 1
        waits = self._waiters()
        for i in np.flatnonzero((waits > 0) & (waits <= written)).tolist():
            self.sh.slot_wakers[i].post()
        return True

    def _first_file(self) -> int:
        names = [int(n) for n in os.listdir(self.cfg.commitlog_dir) if n.isdigit()]
        return min(names, default=0)

    # ------------------------------------------------------------ ConsumeQueue, index, checkpoint
    def _sync_queues(self, dirty: np.ndarray, qmax: np.ndarray) -> None:
        """fdatasync the consume-queue files the queue slots ``dirty`` wrote since the last flush."""
        v, per_file = self.sh.views, self.cq_file_size // ENTRY_SIZE
        for s in dirty.tolist():
            d = queue_dir(self.cfg.root, v["queue_names"][s].decode(), int(v["queue_ids"][s]))
            lo, hi = int(self.cq_flushed[s]), int(qmax[s])
            first = lo - lo % per_file
            for q in range(first, max(hi, first + 1), per_file):
                path = os.path.join(d, offset_to_name(q * ENTRY_SIZE))
                if os.path.exists(path):
                    fdatasync(path)

    def flush_logics(self, force: bool = False) -> None:
        if not force and time.monotonic() - self.last_cq < self.cfg.flushIntervalConsumeQueue / 1000:
            return
        self.last_cq = time.monotonic()
        ts = int(self.ctl[C.DISPATCHED_TS])
        dispatched = int(self.ctl[C.DISPATCHED])     # read first: every entry before it is written
        v = self.sh.views
        n = self.sh.queue_count()
        qmax = v["queue_max"][:n].copy()
        dirty = np.flatnonzero(qmax != self.cq_flushed[:n])
        index = self.cfg.messageIndexEnable
        if len(dirty) > MANY_DIRTY_QUEUES:
            syncfs(os.path.join(self.cfg.root, "consumequeue"))
            if index and os.path.isdir(self.cfg.index_dir):
                syncfs(self.cfg.index_dir)      # (the same filesystem, unless linked elsewhere: then nearly free)
        elif len(dirty):
            self._sync_queues(dirty, qmax)
            if index:
                for p in indexfile.list_index_files(self.cfg.index_dir)[-2:]:
                    fdatasync(p)
        self.cq_flushed[:n] = qmax
        if index and len(dirty):
            self.checkpoint.index_ts = ts
        if len(dirty):
            self.checkpoint.logics_ts, self.checkpoint.logics_offset = ts, dispatched
        try:
            self.checkpoint.save()
        except OSError as e:
            if not no_space(e):
                raise
            self.no_room.met(f"cannot write the checkpoint ({e}); it is written again on the next flush")
            return
        self.no_room.cleared()

    # ------------------------------------------------------------ a slave's cut
    def _cut(self) -> None:
        """A slave's writer cut its CommitLog back to ``cut_to`` (its master lost its tail) and
        waits for this before the bytes go: ``flushed`` and the checkpoint's offsets come back to
        it, so that neither a flush nor recovery takes what follows the cut as stored.  Runs first
        in a pass: a flush that read the old ``written`` has ended."""
        seq, to = int(self.ctl[C.CUT_SEQ]), int(self.ctl[C.CUT_TO])
        if self.ctl[C.FLUSHED] > to:
            self.ctl[C.FLUSHED] = to
        cp = self.checkpoint
        if cp.physic_offset > to or cp.logics_offset > to:
            cp.physic_offset, cp.logics_offset = min(cp.physic_offset, to), min(cp.logics_offset, to)
            try:
                cp.save()
            except OSError as e:
                if not no_space(e):
                    raise
                self.no_room.met(f"cannot write the checkpoint ({e}); the cut of the CommitLog waits for it")
                return
        self.ctl[C.CUT_FLUSHED] = seq

    # ------------------------------------------------------------ loop
    def step(self) -> bool:
        if self.ctl[C.CUT_SEQ] != self.ctl[C.CUT_FLUSHED]:
            self._cut()
        did = self.flush_commitlog(force=self.cfg.sync_flush)
        self.flush_logics()
        return did

    def turn(self) -> float:
        """A flush; nothing to flush: sleep until woken or the next flush interval."""
        if self.step():
            return 0.0
        return (self.cfg.flushIntervalConsumeQueue if self.cfg.sync_flush else
                min(self.cfg.flushIntervalCommitLog, self.cfg.flushIntervalConsumeQueue)) / 1000
