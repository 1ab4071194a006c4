"""The scheduler (``appliance run scheduler``): delivers delayed messages when they are due, as
RocketMQ 4.9.8's ScheduleMessageService does (FACTS §9.1, FACTS-wave2 §2.1), and timers, to any
time within ``timerMaxDelaySec`` (``scheduler/timers.py``, which owns their state).

A delayed message is stored in ``SCHEDULE_TOPIC_XXXX`` queue level-1 (``store/delay.py``), and
the dispatcher writes its delivery time as the entry's tag code.  A level's messages all wait as
long, so each queue is in delivery order: the scheduler looks at the head of each level's queue,
puts every due message again, in its real topic and queue with the same properties, body, flags,
born time and hosts (a new store time and offsets), through its own ring into the writer, and
moves the level's offset past it once the writer has stored it.  Then it sleeps until the
earliest head is due or the dispatcher posts new entries (its slot's ``dispatch_wait``): no
polling while messages wait.  A delivery time later than now plus the level's delay (a clock that
went back) counts as now, as in 4.9.8.

Owns ``config/delayOffset.json`` (``{"offsetTable":{<level>:<next queue offset>}}``, RocketMQ's
format), written at start, every ``PERSIST_S`` when it moved, and at stop; at start each offset is clamped
into its queue's [min, max].  After a crash the deliveries since the last write are made again
(at least once, as RocketMQ, whose window is 10 s); a clean stop delivers none twice.
"""
from __future__ import annotations

import ctypes
import logging
import os
import re
import time

import numpy as np

from rocketbox.scheduler.timers import Timers
from rocketbox.scheduler.transactions import TransactionChecker
from rocketbox.shm import protocol as P
from rocketbox.shm.layout import S
from rocketbox.shm.ringclient import RingClient
from rocketbox.shm.role import LoopRole
from rocketbox.shm.tables import TopicIndex
from rocketbox.store import configfile, delay, message, timer
from rocketbox.store.errors import no_space
from rocketbox.store.salvage import TOMBSTONE_TAGS
from rocketbox.store.view import StoreView

log = logging.getLogger("rocketbox.scheduler")
PERSIST_S = 1.0           # (RocketMQ's flushDelayOffsetInterval is 10 s: a crash then delivers up to 10 s again)
RETRY_S = 0.1             # a put that failed (flow control, a full disk) is tried again after this
IDLE_S = 10.0             # the longest sleep: the offsets are written at least this often
BATCH = 256               # entries of one level looked at, and put, at a time
ROLL_CHECK_S = 60.0       # how often the timers' copies are checked against retention
_LEVEL_KEY = re.compile(rb'\n\t\t"(\d+)":')


def _return_freed_arrays() -> None:
    """glibc raises its mmap threshold after each large free (up to 32 MiB) and then serves the
    next large arrays from the heap, which it keeps: with a million timers, the merges' freed
    arrays would stay as anonymous memory.  A fixed threshold (1 MiB) keeps them mmapped, so a
    freed one goes back to the system."""
    try:
        ctypes.CDLL(None).mallopt(-3, 1 << 20)             # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass                                               # not glibc: its own policy


class SchedulerService(LoopRole):
    def __init__(self, cfg, shared):
        super().__init__(log, "delayOffset.json and timerCheckpoint.json wait")
        self.cfg, self.sh, self.ctl = cfg, shared, shared.control
        self.delays = cfg.delay_levels_ms
        self.path = os.path.join(cfg.config_dir, "delayOffset.json")
        self.offsets: dict[int, int] = {}           # level -> next queue offset to deliver
        self.ring: RingClient | None = None
        self.persisted_at, self.dirty = time.monotonic(), False
        self.seen: tuple = ()                       # the delayed queues' ends the last pass saw
        self.roll_at = time.monotonic() + ROLL_CHECK_S
        self.checks: TransactionChecker | None = None    # transaction check-back, when transactions are served

    # ------------------------------------------------------------ lifecycle
    def open(self) -> "SchedulerService":
        _return_freed_arrays()
        self.ring = RingClient(self.cfg, self.sh).open()
        self.waker = self.ring.waker
        self.view = StoreView(self.cfg, self.sh, self.ring.slot, "scheduler").open()
        self.topics = TopicIndex(self.sh.views, self.ctl)
        data = configfile.read(self.path) or {}
        table = data.get("offsetTable") or {}
        for level in range(1, len(self.delays) + 1):
            lo, hi = self._bounds(level)
            saved = int(table.get(str(level), table.get(level, 0)))
            self.offsets[level] = min(max(saved, lo), hi)          # correctDelayOffset
        self.dirty = True
        self.timers = Timers(self.cfg, self.view).open()
        self.checks = None if self.cfg.rejectTransactionMessage else \
            TransactionChecker(self.cfg, self.sh, self.view, self.ring, self.topics).open()
        self.persist()                                             # the files exist from the start
        return self

    def close(self) -> None:
        if self.ring is not None:
            self.persist()
            self.view.close()
            self.waker = None
            self.ring.close()
            self.ring = None

    def turn(self) -> float:
        due_in = self.step()
        since = time.monotonic() - self.persisted_at
        if since >= PERSIST_S:
            self.persist()
            since = 0.0
        if self.dirty or self.timers.dirty:          # what moved is written within PERSIST_S
            due_in = min(due_in, PERSIST_S - since)
        return max(min(due_in, IDLE_S), 0.0)

    # ------------------------------------------------------------ a pass
    def step(self) -> float:
        """Deliver what is due on every level and every due timer (roll the timers whose copies
        get old); -> seconds until the next delivery (IDLE_S when nothing waits)."""
        due_in = IDLE_S
        self.seen = self._ends()                                # what this pass can see, at least
        for level in range(1, len(self.delays) + 1):
            due_in = min(due_in, self._deliver(level))
            if self.stop_requested:
                return due_in
        due_in = min(due_in, self._deliver_timers())
        if self.checks is not None and not self.stop_requested:
            due_in = min(due_in, self.checks.step())
        if time.monotonic() >= self.roll_at and not self.stop_requested:
            self.roll_at = time.monotonic() + ROLL_CHECK_S
            due_in = min(due_in, self._roll())
        return due_in

    def _ends(self) -> tuple:
        """The ends of the queues the scheduler reads (the levels' and the timers')."""
        view = self.view
        return tuple((view.offsets(delay.SCHEDULE_TOPIC, q) or (0, 0))[1] for q in range(len(self.delays))) + \
            ((view.offsets(timer.TIMER_TOPIC, 0) or (0, 0))[1],)

    def _deliver_timers(self) -> float:
        """Put the due timers, earliest first; -> seconds until the next one is due.  The queue is
        read after the clock: a cancellation dispatched before a timer's time is read before
        the timer can be picked (``readers/timers.py``'s cancel relies on it)."""
        timers, pending = self.timers, self.timers.pending
        while not self.stop_requested:
            now = int(time.time() * 1000)
            timers.ingest()
            entries, end = pending.due(now, BATCH)
            if end == pending.head:
                timers.delivered_through(now)
                nxt = pending.next_due()
                return IDLE_S if nxt is None else max(0.0, (nxt - now) / 1000)
            done = self._put(entries)
            pending.done(done, end)
            timers.dirty = True
            if done < len(entries):
                return RETRY_S
        return RETRY_S

    def _roll(self) -> float:
        """Store again, each with a marker cancelling its old copy, the timers whose copies lie in
        CommitLog files retention will soon delete."""
        line = self.timers.roll_line()
        tidx = self.topics.lookup(timer.TIMER_TOPIC)
        while line and tidx is not None and not self.stop_requested:
            entries = self.timers.pending.below(line, BATCH)
            if not len(entries):
                break
            rows, sizes, records, phys = [], [], [], []
            for p, size in zip(entries["phys"].tolist(), entries["size"].tolist()):
                try:
                    stored = bytes(self.view.record(p, size))
                    h, body, _topic, props = next(message.record_fields(stored, "timer"))
                except Exception as e:
                    log.error("timer at %d cannot be read (%s): not rolled", p, e)
                    continue
                uniq = (message.property_value(props, b"UNIQ_KEY") or b"").decode()
                real = (message.property_value(props, delay.REAL_TOPIC) or b"").decode()
                when = int(message.property_value(props, timer.OUT_MS) or 0)
                copy = message.record_again(h, body, timer.rolled(props), topic=timer.TIMER_TOPIC_BYTES, queue_id=0)
                marker = timer.marker_record(real, uniq, when, p, int(time.time() * 1000), h.store_ip, h.store_port)
                rows += [(0, tidx, 0, h.sys_flag, 1, 0, 0), (0, tidx, 0, timer.host_flags(h.store_ip), 1, 0, 0)]
                sizes += [len(copy), len(marker)]
                records += [copy, marker]
                phys.append(p)
            results = self._submit(rows, sizes, records)
            if results is None:
                return RETRY_S
            for p, copy_r, marker_r in zip(phys, results[0::2], results[1::2]):
                if copy_r.status == P.SUCCESS and marker_r.status == P.SUCCESS:
                    self.timers.pending.cancel(p)
                    self.timers.dirty = True
                else:
                    self.roll_at = time.monotonic() + RETRY_S
                    return RETRY_S
            log.info("timers: %d rolled (their copies were older than fileReservedTime/2)", len(phys))
        return IDLE_S

    def _submit(self, rows: list, sizes: list, records: list) -> list | None:
        """Put encoded records through the ring -> the writer's results, None when it does not
        answer (tried again later)."""
        assert self.ring is not None             # (open claimed it)
        try:
            ticket = self.ring.submit_encoded(np.array(rows, P.REQUEST), np.array(sizes, "<u4"), b"".join(records))
            return self.ring.collect(ticket, 30.0)
        except TimeoutError:
            log.warning("no answer from the writer for %d records: trying again", len(rows))
            return None

    def _deliver(self, level: int) -> float:
        """Put the level's due messages; -> seconds until its head is due."""
        lo, hi = self._bounds(level)
        off = self.offsets[level] = max(self.offsets[level], lo)     # retention may have moved the queue's start
        while off < hi and not self.stop_requested:
            entries = self.view.entries(delay.SCHEDULE_TOPIC, level - 1, off, min(BATCH, hi - off))
            now = int(time.time() * 1000)
            when = np.minimum(entries["tags"].astype(np.int64), now + self.delays[level - 1])   # a clock gone back: now
            later = when > now
            due = int(later.argmax()) if later.any() else len(entries)      # the due ones lead (FIFO per level)
            if due == 0:
                return (int(when[0]) - now) / 1000
            done = self._put(entries[:due])
            if done:
                off = self.offsets[level] = off + done
                self.dirty = True
            if done < due:
                return RETRY_S
            if due < len(entries):
                return (int(when[due]) - now) / 1000
        return IDLE_S

    def _put(self, entries: np.ndarray) -> int:
        """Store the messages of ``entries`` in their real topics and queues -> how many of them,
        from the first, are done (stored, or dropped with a log line); the rest are tried again
        (the writer refused them for now: flow control, a full disk, a stop)."""
        rows, sizes, records, at = [], [], [], []
        for i, (phys, size, tags) in enumerate(zip(entries["phys"].tolist(), entries["size"].tolist(),
                                                   entries["tags"].tolist())):
            if tags == TOMBSTONE_TAGS:
                continue                                   # lost to damage (quarantined)
            try:
                real = self._real(bytes(self.view.record(phys, size)))
            except Exception as e:                         # deleted by retention, damaged: logged, skipped
                log.error("delayed message at %d cannot be read (%s): not delivered", phys, e)
                continue
            if real is not None:
                tidx, qid, rec, sys_flag = real
                rows.append((0, tidx, qid, sys_flag, 1, 0, 0))          # a P.REQUEST row, no flush wait
                sizes.append(len(rec))
                records.append(rec)
                at.append(i)
        if not rows:
            return len(entries)
        results = self._submit(rows, sizes, records)
        if results is None:
            return 0
        for i, r in zip(at, results):
            if r.status in (P.SERVICE_NOT_AVAILABLE, P.QUEUES_FULL):
                return i                                   # this one and what follows: again later
            if r.status != P.SUCCESS:
                log.error("the writer refused a delayed message (status %d, %s): not delivered", r.status, r.remark)
        return len(entries)

    def _real(self, stored: bytes):
        """The record to put for a stored delayed one: its real topic and queue, everything else
        as stored -> (topic index, queue id, record bytes, sysflag), or None (dropped)."""
        h, body, _topic, props = next(message.record_fields(stored, "delayed message"))
        real_topic = message.property_value(props, delay.REAL_TOPIC)
        real_qid = message.property_value(props, delay.REAL_QID)
        if real_topic is None or real_qid is None or not real_qid.isdigit():
            log.error("delayed message without a REAL_TOPIC and REAL_QID: not delivered")
            return None
        topic = real_topic.decode("utf-8", "replace")
        if topic == delay.HALF_TOPIC:
            return None                                  # 4.9.8 drops these
        tidx = self.topics.lookup(topic)
        if tidx is None:
            log.error("delayed message for topic %s, which no longer exists: not delivered", topic)
            return None
        rec = message.record_again(h, body, props, topic=real_topic, queue_id=int(real_qid))
        return tidx, int(real_qid), rec, h.sys_flag

    # ------------------------------------------------------------ state
    def _bounds(self, level: int) -> tuple[int, int]:
        """The level's queue's [min, max] offsets (0, 0 before its first message)."""
        return self.view.offsets(delay.SCHEDULE_TOPIC, level - 1) or (0, 0)

    def persist(self) -> None:
        """delayOffset.json as RocketMQ writes it (the level keys unquoted: ``{1:0,2:17}``), and
        the timers' checkpoint."""
        self.persisted_at = time.monotonic()
        try:
            self.timers.persist()
            if self.checks is not None:
                self.checks.persist()
            if self.dirty or not os.path.exists(self.path):
                text = configfile.dumps({"offsetTable": {str(k): v for k, v in sorted(self.offsets.items())}})
                configfile.write_bytes(self.path, _LEVEL_KEY.sub(rb"\n\t\t\1:", text))
                self.dirty = False
        except OSError as e:
            if not no_space(e):
                raise
            self.no_room.met(e)                  # written again a second later: a crash meanwhile delivers again
            return
        self.no_room.cleared()

    def sleep(self, seconds: float) -> None:
        """Until ``seconds`` pass, the dispatcher posts new entries, or a stop."""
        if seconds <= 0 or self.stop_requested:
            return
        assert self.ring is not None
        row = self.sh.slots[self.ring.slot]
        row[S.DISPATCH_WAIT] = 2                 # the dispatcher posts our waker after a pass with delayed messages
        try:
            if self._ends() != self.seen:
                return                           # dispatched after the pass looked, before the flag: no post came
            self.ring.waker.wait(seconds)
        finally:
            row[S.DISPATCH_WAIT] = 0
