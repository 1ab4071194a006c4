"""The cleaner: watches the disk the store lives on and deletes expired CommitLog files, as
RocketMQ's CleanCommitLogService does (FACTS-wave2 §7).

Every ``CHECK_S`` it measures how full the partitions of the CommitLog, the consume queues and the
index are (``df``'s Use%: used / (used + available to non-root), rounded up to a percent, as
RocketMQ's ``getDiskPartitionSpaceUsedPercent``) and publishes each ratio; above
``diskSpaceWarningLevelRatio`` it raises ``disk_full``, and readers refuse sends with
SERVICE_NOT_AVAILABLE (14) and RocketMQ's remark until the ratio is back at or below it.  Each
change of state is logged once.

Retention, every ``cleanResourceInterval`` ms: when the hour is one of ``deleteWhen``'s, or the
CommitLog's partition is fuller than ``diskMaxUsedSpaceRatio``, CommitLog files older than
``fileReservedTime`` hours (by mtime) go, oldest first, stopping at the first that has not
expired; fuller than ``diskSpaceCleanForciblyRatio`` (with ``cleanFileForciblyEnable``) the oldest
go whatever their age.  Never the newest file, never one not yet dispatched and flushed, at most
``DELETE_MAX`` a pass.  ``min_phys`` is raised before a file is unlinked; the dispatcher then
deletes the consume-queue and index files that point only below it and moves each queue's min
offset (consumers behind it get OFFSET_MOVED), and readers let go of their mappings.  Each deletion
logs, per consumer group with an offset on a topic in the deleted files, how many of its messages
there the group had not consumed yet (a WARNING when any, counted in ``retention_unconsumed``).

Scrub (``Scrubber``): every ``scrubIntervalHours`` a pass verifies every record below what is
flushed and dispatched, at ``scrubBytesPerSecond``, and reports damage (log, quarantine) before a
consumer meets it; RocketMQ checks CRCs only at recovery.

Sole writer of: ``disk_cl_ppm``, ``disk_cq_ppm``, ``disk_index_ppm``, ``disk_full``,
``retention_unconsumed``, and, once
recovery has set it, ``min_phys``.
"""
from __future__ import annotations

import logging
import os
import threading
import time

from rocketbox.shm.disk import disk_remark, used_ratio
from rocketbox.shm.layout import C
from rocketbox.shm.role import LoopRole
from rocketbox.store import quarantine, salvage
from rocketbox.store.consumequeue import ConsumeQueue, file_size_for
from rocketbox.store.errors import CorruptData
from rocketbox.store.mappedfile import MappedFileQueue

log = logging.getLogger("rocketbox.cleaner")
CHECK_S = 1.0          # RocketMQ checks every 10 s; a statvfs a second costs nothing and refuses sooner
SCRUB_FIRST_AFTER = 0.05   # of scrubIntervalHours: the first pass after a start (72 min with the default)
DELETE_MAX = 10        # CommitLog files deleted in one pass (RocketMQ's deleteFileBatchMax)


class CleanerService(LoopRole):
    def __init__(self, cfg, shared):
        super().__init__(log)
        self.cfg, self.sh, self.ctl = cfg, shared, shared.control
        self.paths = (cfg.commitlog_dir, os.path.join(cfg.root, "consumequeue"), cfg.index_dir)
        self.woken = threading.Event()          # its waker: nothing posts the cleaner but a stop
        self.scrubber = Scrubber(cfg, "cleaner")
        self.next_pass = time.time() + cfg.scrubIntervalHours * 3600 * SCRUB_FIRST_AFTER

    def open(self) -> "CleanerService":
        self.check_disk()
        self.next_clean = time.monotonic() + self.cfg.cleanResourceInterval / 1000
        return self

    def close(self) -> None:
        self.scrubber.close()

    def wake(self) -> None:
        self.woken.set()

    def sleep(self, seconds: float) -> None:
        self.woken.wait(seconds)
        self.woken.clear()

    def check_disk(self) -> None:
        ratios = [used_ratio(p) for p in self.paths]
        for word, r in zip((C.DISK_CL_PPM, C.DISK_CQ_PPM, C.DISK_INDEX_PPM), ratios):
            self.ctl[word] = int(round(r * 1e6))
        limit = self.cfg.diskSpaceWarningLevelRatio / 100
        worst = max(ratios)
        full = worst > limit
        if full != bool(self.ctl[C.DISK_FULL]):
            self.ctl[C.DISK_FULL] = int(full)
            if full:
                log.error("disk full: %s (limit %.2f, diskSpaceWarningLevelRatio): sends are refused until it is "
                          "back at or below the limit", disk_remark(self.ctl).split("[")[1].split("]")[0], limit)
            else:
                log.warning("disk no longer full (%.2f, limit %.2f): sends are taken again", worst, limit)

    def retention(self, now: float | None = None) -> list[str]:
        """One retention pass (see the module's docstring). -> the files deleted."""
        now = time.time() if now is None else now
        ratio = int(self.ctl[C.DISK_CL_PPM]) / 1e6
        forced = self.cfg.cleanFileForciblyEnable and ratio > self.cfg.diskSpaceCleanForciblyRatio / 100
        hour = time.localtime(now).tm_hour
        due = hour in {int(h) for h in self.cfg.deleteWhen.split(";")}
        if not (due or forced or ratio > self.cfg.diskMaxUsedSpaceRatio / 100 or ratio < 0):
            return []
        keep_s = self.cfg.fileReservedTime * 3600
        safe = min(int(self.ctl[C.DISPATCHED]), int(self.ctl[C.FLUSHED]))
        directory = self.cfg.commitlog_dir
        names = sorted(n for n in os.listdir(self.cfg.commitlog_dir) if n.isdigit() and len(n) == 20) \
            if os.path.isdir(self.cfg.commitlog_dir) else []
        doomed = []
        for name in names[:-1][:DELETE_MAX]:                 # never the newest
            start, path = int(name), os.path.join(directory, name)
            if start + self.cfg.mappedFileSizeCommitLog > safe:
                break
            try:
                expired = os.path.getmtime(path) + keep_s <= now
            except OSError:
                break
            if not (expired or forced):
                break                                          # no holes: the oldest go first
            doomed.append((start, path))
        if not doomed:
            return []
        cost = self.unconsumed(doomed[-1][0] + self.cfg.mappedFileSizeCommitLog)
        gone = []
        for start, path in doomed:
            self.ctl[C.MIN_PHYS] = start + self.cfg.mappedFileSizeCommitLog      # before the bytes go
            os.unlink(path)
            gone.append(path)
        lost = sum(cost.values())
        self.ctl[C.RETENTION_UNCONSUMED] += lost
        self.ctl[C.RETENTION_FILES] += len(gone)
        if forced and not due:
            self.ctl[C.RETENTION_FORCED] += len(gone)
        why = ("forced: disk %.2f" % ratio if forced and not due else
               ("deleteWhen hour %d" % hour if due else "disk %.2f" % ratio))
        per_group = ", ".join(f"{g} on {t}: {n}" for (g, t), n in sorted(cost.items())) or "no group has an offset there"
        log.log(logging.WARNING if lost else logging.INFO,
                "retention deleted %d CommitLog file(s) (%s; %s), min offset now %d; messages in them not consumed "
                "yet, per group: %s%s", len(gone), why, ", ".join(os.path.basename(p) for p in gone),
                int(self.ctl[C.MIN_PHYS]), per_group,
                f" ({lost} unconsumed messages deleted: cleanFileForciblyEnable=false keeps them, refusing sends "
                "instead; docs/STORE-SAFETY.md)" if lost else "")
        self.sh.dispatcher_waker.post()
        return gone

    def unconsumed(self, below: int) -> dict[tuple[str, str], int]:
        """(group, topic) -> how many of the topic's messages stored below CommitLog offset ``below``
        the group has not consumed yet (past its committed offset), for every group with a committed
        offset on a queue that has messages there: what deleting below ``below`` costs it."""
        v, n = self.sh.views, int(self.ctl[C.OFFSET_COUNT])
        size = file_size_for(self.cfg.mappedFileSizeConsumeQueue)
        cqs: dict[tuple[str, int], ConsumeQueue] = {}
        out: dict[tuple[str, str], int] = {}
        try:
            for s in range(n):
                topic, _, group = bytes(v["offset_keys"][s]).decode("utf-8", "replace").partition("@")
                qid, committed = int(v["offset_qids"][s]), int(v["offset_values"][s])
                cq = cqs.get((topic, qid))
                if cq is None:
                    cq = cqs[(topic, qid)] = ConsumeQueue(self.cfg.root, topic, qid, size, False).load()
                first = cq.first_at_or_past(below)
                if first > cq.min_offset and committed >= 0:    # the queue has messages there
                    out[(group, topic)] = out.get((group, topic), 0) + max(0, first - max(committed, cq.min_offset))
        finally:
            for cq in cqs.values():
                cq.close()
        return out

    def scrub(self, seconds: float) -> None:
        """Scrub for about ``seconds`` at ``scrubBytesPerSecond``; a pass starts every
        ``scrubIntervalHours`` (0: one after the other)."""
        rate = self.cfg.scrubBytesPerSecond
        if not rate or time.time() < self.next_pass:
            return
        limit = min(int(self.ctl[C.FLUSHED]), int(self.ctl[C.DISPATCHED]))
        budget, t0 = int(rate * seconds), time.monotonic()
        while budget > 0 and not self.stop_requested:
            n = self.scrubber.step(min(budget, 4 << 20), limit, int(self.ctl[C.MIN_PHYS]))
            if n == 0:                            # the pass is over
                log.info("scrub pass done through offset %d: %d damaged records so far", limit, self.scrubber.damaged)
                self.scrubber.pos = -1
                self.next_pass = time.time() + self.cfg.scrubIntervalHours * 3600
                return
            budget -= n
        left = seconds - (time.monotonic() - t0)
        if left > 0:
            self.woken.wait(left)

    def turn(self) -> float:
        """The disk's ratios; retention every ``cleanResourceInterval``; a scrub's share of a tick
        (which takes the tick itself) when a pass is due, else a sleep of one tick."""
        self.check_disk()
        if time.monotonic() >= self.next_clean:
            self.retention()
            self.next_clean = time.monotonic() + self.cfg.cleanResourceInterval / 1000
        tick = min(CHECK_S, self.cfg.cleanResourceInterval / 1000)
        if self.cfg.scrubBytesPerSecond and time.time() >= self.next_pass:
            self.scrub(tick)
            self.woken.clear()
            return 0.0
        return tick


class Scrubber:
    """Walks the CommitLog verifying every record (magic, sizes, CRC, PHYSICALOFFSET) at a bounded
    rate, below what is flushed and dispatched, and reports a damaged one once (log and
    quarantine, ``foundBy`` its name) before a consumer meets it.  ``step(budget)`` verifies up to
    ``budget`` bytes and says how many it read; a pass ends at the end of what it may read."""

    def __init__(self, cfg, name: str):
        self.cfg, self.name = cfg, name
        self.cl = MappedFileQueue(cfg.commitlog_dir, cfg.mappedFileSizeCommitLog, False)
        self.pos = -1                     # next offset to verify (-1: start a pass at the log's start)
        self.reported: set[int] = set()
        self.damaged = 0

    def close(self) -> None:
        self.cl.close()

    def step(self, budget: int, limit: int, min_phys: int) -> int:
        """Verify records in [pos, limit) for up to ``budget`` bytes (whole records, one file at a
        time). -> bytes read (0: the pass is over)."""
        if self.pos < min_phys:
            self.pos = min_phys
        if self.pos >= limit:
            return 0
        mf = self.cl.file_for(self.pos)
        if mf is None:
            self.cl.refresh()
            while self.cl.files and self.cl.files[0].end <= min_phys:
                self.cl.files.pop(0).close()
            mf = self.cl.file_for(self.pos)
            if mf is None:
                return 0
        at, stop = self.pos - mf.start, min(limit - mf.start, mf.size, self.pos - mf.start + budget)
        start = at
        while at < stop:
            size = salvage.verified(mf.mm, at, mf.start + at, mf.size)
            if size == 0:                       # the file's filler: on to the next file
                at = mf.size
                break
            if size is None:
                resume = salvage.damage_end(self.cl.files, self.cl.files.index(mf), at)
                if resume is None:
                    self.pos = limit                # the log's end (offline: past the last record)
                    return max(at - start, 1)
                self._damage(mf, at, resume)
                at = resume
                continue
            at += size
        self.pos = mf.start + at
        return max(at - start, 1)

    def _damage(self, mf, at: int, end: int) -> None:
        phys = mf.start + at
        if phys not in self.reported:
            self.reported.add(phys)
            self.damaged += 1
            try:
                salvage.check(mf, at)
                why = "BLANK filler that does not run to the file's end"
            except CorruptData as e:
                why = e.why
            log.error("scrub: damaged record at offset %d (%s @ %d, %d bytes to the next verified record): %s",
                      phys, mf.path, at, end - at, why)
            try:
                quarantine.note(self.cfg.root, self.name, {
                    "offset": phys, "length": end - at, "file": mf.path, "fileOffset": at, "reason": why,
                    "topic": None, "queueId": None, "queueOffset": None, "identity": "unknown",
                    "foundBy": self.name}, bytes(mf.mm[at:end]))
            except OSError as e:
                log.error("cannot write the quarantine entry of offset %d: %s", phys, e)
