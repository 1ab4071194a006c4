"""A config file written by a thread of its own, so the writer's append loop never waits on the
file system for it (topics.json, subscriptionGroup.json).

Writing a config file durably is a temporary file, its fsync, a copy to ``.bak`` and a rename:
~2-3 ms, during which every send would wait if the loop did it.  RocketMQ's broker persists these
files from the thread that handled the admin request, not from its CommitLog's.  Here the owner
changes its state in the loop, under ``lock``, and ``submit``s a job per change; the thread takes
every job submitted so far in one go, lays out the file with ``lay_out(jobs)`` (under ``lock``:
the state it reads is the owner's), writes it with ``store(text, jobs)`` outside it, and posts
``waker``.  The loop takes each written batch from ``done()``: ``(jobs, None)``, or ``(jobs,
error)`` when the write failed.  Changes that come while a write is under way go in the next
one: topics made back to back share an fsync.  An owner whose file is read from shared memory
(consumerOffset.json) has no ``lay_out``: its ``store`` reads and writes outside the lock.
"""
from __future__ import annotations

import logging
import threading

log = logging.getLogger("rocketbox.writer")


class FileThread:
    def __init__(self, name: str, lay_out, store, waker=None):
        self.lay_out, self.store, self.waker = lay_out, store, waker
        self.lock = threading.Condition()        # reentrant: the owner may submit while holding it
        self.pending: list = []                  # jobs not yet taken by the thread
        self.finished: list[tuple[list, Exception | None]] = []
        self.writing = self.closing = False
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def submit(self, job) -> None:
        with self.lock:
            if self.closing:
                raise RuntimeError(f"{self.thread.name} is closed")
            self.pending.append(job)
            self.lock.notify_all()

    def done(self) -> list[tuple[list, Exception | None]]:
        """The batches written (or failed) since the last call, in the order they were taken."""
        if not self.finished:                    # (the loop's common case: no lock taken)
            return []
        with self.lock:
            out, self.finished = self.finished, []
        return out

    def wait_idle(self) -> None:
        """Until every job submitted so far is written (or has failed)."""
        with self.lock:
            while self.pending or self.writing:
                self.lock.wait()

    def close(self) -> None:
        """Write what is pending, then end the thread (``done`` still has the last batches)."""
        with self.lock:
            self.closing = True
            self.lock.notify_all()
        self.thread.join()

    def _run(self) -> None:
        while True:
            with self.lock:
                while not self.pending and not self.closing:
                    self.lock.wait()
                if not self.pending:
                    return
                jobs, self.pending, self.writing = self.pending, [], True
                try:
                    text, error = (self.lay_out(jobs) if self.lay_out is not None else None), None
                except Exception as e:           # a bug: the jobs fail, the thread lives on
                    log.exception("%s: laying out the file failed", self.thread.name)
                    text, error = None, e
            if error is None:
                try:
                    self.store(text, jobs)
                except Exception as e:           # OSError (a full disk, ...): the owner's to answer
                    error = e
            with self.lock:
                self.finished.append((jobs, error))
                self.writing = False
                self.lock.notify_all()
            if self.waker is not None:
                self.waker.post()
