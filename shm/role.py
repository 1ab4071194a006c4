"""The life of a role that loops over the shared state (writer, dispatcher, flusher, cleaner,
scheduler), as RocketMQ's ``ServiceThread`` is for its services.

``appliance run ROLE`` calls ``open()``, ``run()`` until a stop is requested, then ``close()``.
SIGTERM calls ``request_stop``: a flag and a wake, all a signal handler may do. ``run`` is turns:
``turn()`` does what there is and says how long the role may sleep before the next one (0: at
once); ``sleep`` ends early when the role is woken (its waker posted: new work, or the stop).
After the stop request, ``drain()`` does what a stop still owes (the writer answers what producers
queued, the dispatcher catches up with what was written).

The conditions a role waits out rather than fails on: a full disk (``no_room``) and no descriptor
or mapping left for a file (``no_files``), each logged once when it begins and once when it ends.
A role whose turns wait them out (``WAITS_OUT_TURNS``) has a turn that met one tried again
``WAIT_OUT_S`` later, and hears of it through ``waiting``; anything else a turn raises ends the
process, and the supervisor (or systemd) starts it again.
"""
from __future__ import annotations

import logging
import time

from rocketbox.shm.wake import PipeWaker, Waker
from rocketbox.store.errors import Condition, no_space, out_of_files

WAIT_OUT_S = 1.0    # a turn that met a full disk or no descriptor is tried again this much later
IDLE_S = 1.0        # the longest sleep of a role with nothing to do (a lost post costs no more)


class LoopRole:
    WAITS_OUT_TURNS = False
    NO_ROOM_MEANS = ""       # what a full disk means meanwhile, for the log line that says it began
    NO_FILES_MEANS = ""      # what no descriptor left means meanwhile

    def __init__(self, log: logging.Logger, waits: str = "its files wait") -> None:
        """``waits``: what waits, as the log lines say it ("consume queues and index wait")."""
        self.stop_requested = False
        self.waker: Waker | PipeWaker | None = None     # what ``sleep`` waits on and ``wake`` posts
        self.no_room = Condition(log, f"{waits}: the disk is full")
        self.no_files = Condition(log, f"{waits}: no descriptor or mapping left for a file")

    # ------------------------------------------------------------ what a role defines
    def open(self) -> LoopRole:
        return self

    def close(self) -> None:
        pass

    def turn(self) -> float:
        """Do what there is. -> seconds the role may sleep before the next turn (0: go on now)."""
        raise NotImplementedError

    def drain(self) -> None:
        """After a stop request: what the stop still owes."""

    def sleep(self, seconds: float) -> None:
        """Until ``seconds`` pass or the role is woken."""
        assert self.waker is not None
        self.waker.wait(seconds)

    def wake(self) -> None:
        """End a sleep (from any thread, or a signal handler)."""
        if self.waker is not None:
            self.waker.post()

    def waiting(self, full: bool) -> None:
        """A turn began (True) or ended (False) waiting out a full disk."""

    # ------------------------------------------------------------ the loop
    def request_stop(self) -> None:
        self.stop_requested = True
        self.wake()

    def run(self) -> None:
        while not self.stop_requested:
            pause = self.guarded_turn() if self.WAITS_OUT_TURNS else self.turn()
            if pause and not self.stop_requested:
                self.sleep(pause)
        self.drain()

    def guarded_turn(self) -> float | None:
        """``turn()``, with a full disk or no descriptor waited out (a plain sleep: the posts that
        come meanwhile must not retry it at once). -> the pause before the next turn; None when
        the turn was waited out."""
        try:
            pause = self.turn()
        except Exception as e:
            if out_of_files(e):
                self.no_files.met(f"{e}; {self.NO_FILES_MEANS}")
            elif no_space(e):
                if self.no_room.since is None:
                    self.waiting(True)
                self.no_room.met(f"{e}; {self.NO_ROOM_MEANS}")
            else:
                raise
            time.sleep(WAIT_OUT_S)
            return None
        if self.no_room.since is not None:
            self.waiting(False)
            self.no_room.cleared()
        self.no_files.cleared()
        return pause
