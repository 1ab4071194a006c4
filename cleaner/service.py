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
offset (consumers behind it get OFFSET_MOVED), and readers let go of their mappings.

Sole writer of: ``disk_cl_ppm``, ``disk_cq_ppm``, ``disk_index_ppm``, ``disk_full``, and, once
recovery has set it, ``min_phys``.
"""
from __future__ import annotations

import logging
import math
import os
import threading
import time

from shm.layout import C

log = logging.getLogger("rocketbox.cleaner")
CHECK_S = 1.0          # RocketMQ checks every 10 s; a statvfs a second costs nothing and refuses sooner
DELETE_MAX = 10        # CommitLog files deleted in one pass (RocketMQ's deleteFileBatchMax)


def used_ratio(path: str) -> float:
    """How full the partition holding ``path`` (or its nearest existing parent) is, 0..1, as
    ``df`` and RocketMQ compute it; -1 when it cannot be told."""
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        st = os.statvfs(path or "/")
    except OSError:
        return -1.0
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    usable = st.f_bavail * st.f_frsize
    if used + usable <= 0:
        return -1.0
    return math.ceil(used * 100 / (used + usable)) / 100


def disk_remark(ctl) -> str:
    """RocketMQ's remark for a send refused because the disk is full (``SendMessageProcessor``'s
    ``diskUtil``: the three ratios, 0..1)."""
    cl, cq, ix = (int(ctl[w]) / 1e6 for w in (C.DISK_CL_PPM, C.DISK_CQ_PPM, C.DISK_INDEX_PPM))
    return ("service not available now. It may be caused by one of the following reasons: the broker's disk is "
            f"full [CL: {cl:5.2f} CQ: {cq:5.2f} INDEX: {ix:5.2f}], messages are put to the slave, message store "
            "has been shut down, etc.")


class CleanerService:
    def __init__(self, cfg, shared):
        self.cfg, self.sh, self.ctl = cfg, shared, shared.control
        self.paths = (cfg.commitlog_dir, os.path.join(cfg.root, "consumequeue"), cfg.index_dir)
        self.stop_requested = False
        self.woken = threading.Event()

    def open(self) -> "CleanerService":
        self.check_disk()
        return self

    def close(self) -> None:
        pass

    def wake(self) -> None:
        self.woken.set()

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
        gone = []
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
            self.ctl[C.MIN_PHYS] = start + self.cfg.mappedFileSizeCommitLog      # before the bytes go
            os.unlink(path)
            gone.append(path)
        if gone:
            log.info("retention deleted %d CommitLog file(s) (%s; %s), min offset now %d", len(gone),
                     "forced: disk %.2f" % ratio if forced and not due else
                     ("deleteWhen hour %d" % hour if due else "disk %.2f" % ratio),
                     ", ".join(os.path.basename(p) for p in gone), int(self.ctl[C.MIN_PHYS]))
            self.sh.dispatcher_waker.post()
        return gone

    def run(self) -> None:
        next_clean = time.monotonic() + self.cfg.cleanResourceInterval / 1000
        while not self.stop_requested:
            self.check_disk()
            if time.monotonic() >= next_clean:
                self.retention()
                next_clean = time.monotonic() + self.cfg.cleanResourceInterval / 1000
            self.woken.wait(min(CHECK_S, self.cfg.cleanResourceInterval / 1000))
            self.woken.clear()
