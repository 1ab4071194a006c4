"""Boot recovery: bring the store files to a consistent state and initialise the shared offsets,
before any role starts (FACTS §6).  Runs in the supervisor (or ``appliance run recover``), alone.

1. ``abort`` present => the last exit was abnormal.
   A gap in the CommitLog (a file missing or short between others, queues pointing past the last
   file: ``store/gaps.py``) stops here, before anything is cut or deleted.
2. Load topics.json into the shared topic table, the CommitLog files, every consume queue
   (each finds the end of its valid entries) and the checkpoint.
3. Scan the CommitLog (magic, lengths, CRC, PHYSICALOFFSET): a normal restart from the
   3rd-from-last file, an abnormal one from the checkpoint's safe offset (everything before it,
   derived files too, is on disk), else from the newest file whose first record is older than the
   checkpoint's min timestamp.  A bad record with nothing verified after it is the torn tail:
   everything past it is cut.  A bad record with verified records after it (in its file or a
   later one) is damage inside the log: it costs that span only.  A tombstone record of the same
   length is written over it, the consume-queue entries into it point at the tombstone, and the
   span goes to the quarantine with its original bytes (``store/salvage.py``,
   ``store/quarantine.py``); everything after it is kept and dispatched.
4. Consume queues that point past the cut are truncated; index entries past the cut, or after a
   crash from the scan start on, are dropped (the index file truncated, not deleted).
5. Re-dispatch from the earliest point the derived files may lack: the largest CQ end (as
   RocketMQ), the abnormal scan start, where index entries were dropped, or the whole log when a
   known topic-queue lost its consume-queue directory or ``index/`` is gone.  The dispatcher code does it, in-process.
6. Publish written / flushed / dispatched and the queue table; mark the state recovered.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

from rocketbox.dispatcher.service import DispatcherService
from rocketbox.shm.layout import C
from rocketbox.shm.tables import append_queue
from rocketbox.store import gaps, indexfile, message, quarantine, salvage, topicjournal
from rocketbox.store.checkpoint import Checkpoint
from rocketbox.store.consumequeue import load_all, queue_dir
from rocketbox.store.errors import CorruptData
from rocketbox.store.mappedfile import MappedFile, MappedFileQueue
from rocketbox.writer.groups import ConsumerOffsets
from rocketbox.writer.topics import TopicTable, queue_nums

log = logging.getLogger("rocketbox.recovery")


@dataclass
class RecoveryReport:
    abnormal: bool
    scan_from: int
    end_offset: int          # CommitLog end after recovery
    cut_bytes: int           # bytes of torn/corrupt tail removed (within the last file)
    redispatch_from: int
    queues: int
    damaged: int = 0         # damaged spans replaced by tombstones (store/salvage.py)


@dataclass
class Damage:
    """A span of the CommitLog that failed its checks, with verified records (or the file's end)
    after it: ``at`` and ``length`` within ``mf``."""
    mf: MappedFile
    at: int
    length: int
    why: str
    found_by: str = "recovery"

    @property
    def phys(self) -> int:
        return self.mf.start + self.at


def _scan(commitlog: MappedFileQueue, start: int, check_crc: bool) -> tuple[int, list[Damage]]:
    """Walk records from offset ``start`` (a record boundary) with ``salvage.walk``: a record that
    fails its checks with a verified record after it is damage, noted and stepped over; one with
    nothing verified after it is the torn tail, where the log ends.  -> (the end offset, the damage)."""
    files, damages, end = commitlog.files, [], start
    first = next(i for i, f in enumerate(files) if f.start <= start < f.end)
    for step in salvage.walk(files, first, start - files[first].start, check_crc):
        if step.kind == "damage":
            damages.append(Damage(step.mf, step.at, step.length, step.why or ""))
        end = step.end
    return end, damages


def _scan_start(commitlog: MappedFileQueue, checkpoint: Checkpoint, abnormal: bool, index: bool) -> int:
    """Where the scan starts: after a clean stop, the 3rd-from-last file (RocketMQ's
    recoverNormally); after a crash, the checkpoint's safe offset, before which the CommitLog and
    every derived file are on disk, so recovery costs what was written since the checkpoint, not
    the store's size; without one, the newest file whose first record is older than the
    checkpoint's times (RocketMQ's recoverAbnormally)."""
    files = commitlog.files
    if not abnormal:
        return files[max(0, len(files) - 3)].start
    safe = checkpoint.safe_offset
    if 0 < safe and any(f.start <= safe < f.end for f in files):
        return safe
    safe_ts = checkpoint.min_timestamp_index if index else checkpoint.min_timestamp
    return files[_abnormal_start(commitlog, safe_ts)].start


def _abnormal_start(commitlog: MappedFileQueue, min_ts: int) -> int:
    for i in range(len(commitlog.files) - 1, -1, -1):
        mm = commitlog.files[i].mm
        try:
            if message.check_record(mm, 0, False) > 0:
                store_ts = message.store_ts_of(mm, 0)
                if store_ts != 0 and store_ts <= min_ts:
                    return i
        except CorruptData:
            continue
    return 0


def _load_queues(cfg) -> tuple[dict, bool]:
    """Every consume queue; one whose files cannot be loaded (a file missing between others, or
    short) is moved aside into the quarantine, whole, to be rebuilt from the CommitLog.
    -> (the queues, whether one was moved)."""
    broken: list = []
    cqs = load_all(cfg.root, cfg.mappedFileSizeConsumeQueue, True, broken)
    for (topic, qid), why in broken:
        aside = os.path.join(quarantine.directory(cfg.root), "consumequeue", topic, f"{qid}.{int(time.time() * 1000)}")
        os.makedirs(os.path.dirname(aside), exist_ok=True)
        os.rename(queue_dir(cfg.root, topic, qid), aside)
        log.error("consume queue %s/%d cannot be read (%s): moved to %s, rebuilt from the CommitLog", topic, qid,
                  why, aside)
    return cqs, bool(broken)


def recover(cfg, shared) -> RecoveryReport:
    ctl, views = shared.control, shared.views
    abnormal = os.path.exists(os.path.join(cfg.root, "abort"))
    damages: list[Damage] = []
    tombstones: list[tuple[int, int]] = []
    os.makedirs(cfg.root, exist_ok=True)
    topics = TopicTable(cfg, views, ctl)
    topics.load()
    ConsumerOffsets(cfg, views, ctl).load()
    checkpoint = Checkpoint(os.path.join(cfg.root, "checkpoint")).load()
    cqs, moved = _load_queues(cfg)
    try:
        gaps.refuse(gaps.find(cfg.commitlog_dir, cfg.mappedFileSizeCommitLog, cqs.values()))
        commitlog = MappedFileQueue(cfg.commitlog_dir, cfg.mappedFileSizeCommitLog, True).load()
    except BaseException:
        for cq in cqs.values():
            cq.close()
        raise
    tombstones = gaps.accepted(cfg.root)
    try:
        files = commitlog.files
        if not files:
            scan_from = end = 0
            for cq in cqs.values():
                cq.truncate_phys(0)
        else:
            scan_from = _scan_start(commitlog, checkpoint, abnormal, cfg.messageIndexEnable)
            end, damages = _scan(commitlog, scan_from, cfg.checkCRCOnRecover)
        last_end = files[-1].end if files else 0
        cut = 0
        if files and end < last_end:
            holder = commitlog.file_for(end) or commitlog.file_for(end - 1)
            cut = salvage.tail_length(holder, end - holder.start) if holder else 0
            for mf in commitlog.files:
                if mf.start >= end:          # (a torn tail: no verified record in them, _scan made sure)
                    log.warning("CommitLog: file %s is past the torn tail at %d and holds no verified record: "
                                "deleted", mf.path, end)
            commitlog.truncate(end)
            if cut:
                log.warning("CommitLog: cut %d bytes of torn or corrupt data at offset %d", cut, end)
        for cq in cqs.values():
            if cq.max_phys > end:
                cq.truncate_phys(end)
        damages += _found_damage(_unburied(cfg), commitlog, end, damages)
        if files and damages:
            tombstones = sorted(tombstones + _bury(cfg, damages, cqs, topics.configs))
        redispatch = max((cq.max_phys for cq in cqs.values()), default=0)
        if abnormal and files:
            redispatch = min(redispatch, scan_from)
        cutoff = min(end, scan_from) if abnormal else end
        redispatch = min(redispatch, indexfile.trim(cfg.index_dir, cutoff, cfg.maxHashSlotNum, cfg.maxIndexNum),
                         _index_end(cfg, commitlog, end))
        lost = _lost_queue_dirs(cfg, topics)
        if files and (lost or moved):
            if lost:
                log.warning("known queues have no consume-queue directory (%s%s): rebuilding them from the whole "
                            "CommitLog", ", ".join(lost[:5]), f" and {len(lost) - 5} more" if len(lost) > 5 else "")
            redispatch = commitlog.min_offset
        redispatch = max(min(redispatch, end), commitlog.min_offset)
        for (topic, qid), cq in sorted(cqs.items()):
            if commitlog.min_offset > 0:                      # retention deleted the log's start
                cq.retire(commitlog.min_offset)
            _register_queue(shared, topic, qid, cq)
        ctl[C.MIN_PHYS] = commitlog.min_offset
        ctl[C.WRITTEN] = ctl[C.FLUSHED] = ctl[C.BOOT_WRITTEN] = end
        ctl[C.JOURNAL_WRITTEN] = -1
        ctl[C.DISPATCHED] = redispatch
        for mf in commitlog.files[-1:]:
            mf.flush()
    finally:
        for cq in cqs.values():
            cq.close()
        commitlog.close()
    _redispatch(cfg, shared, tombstones)
    topics.ensure_queue_dirs()      # so that a deleted directory is noticed next time
    if cfg.messageIndexEnable:
        os.makedirs(cfg.index_dir, exist_ok=True)
    ctl[C.RECOVERED] = 1
    return RecoveryReport(abnormal, scan_from, end, cut, redispatch, shared.queue_count(), len(damages))


def _unburied(cfg) -> list[dict]:
    """The quarantine's damage found while running and not a tombstone yet."""
    try:
        return quarantine.unburied(cfg.root)
    except ValueError as e:
        log.error("the quarantine lists cannot be read (%s): damage found while running stays as it is", e)
        return []


def _found_damage(entries: list[dict], commitlog: MappedFileQueue, end: int, known: list[Damage]) -> list[Damage]:
    """Damage running processes found and left in place (a read that left a record out, the
    scrub: ``_unburied``'s ``entries``), each as the span from it to the next verified record, so
    that it ends as the tombstone recovery makes for its own finds: one outcome for ``appliance
    check`` and Spark whoever found it.  A record that verifies now (the bytes read were damaged in
    memory, not on disk), or that ``known`` damage covers already, is left alone."""
    seen = {d.phys for d in known}
    out = []
    for e in entries:
        phys = e.get("offset")
        if not isinstance(phys, int) or phys in seen or phys >= end:
            continue
        mf = commitlog.file_for(phys)
        if mf is None:                                       # (retention deleted it since)
            continue
        at = phys - mf.start
        if salvage.verified(mf.mm, at, phys, mf.size) is not None:
            continue
        resume = salvage.damage_end(commitlog.files, commitlog.files.index(mf), at)
        if resume is None:
            continue
        seen.add(phys)
        out.append(Damage(mf, at, resume - at, e.get("reason") or "found damaged while running", e["foundBy"]))
    return out


def bury_found(cfg) -> int:
    """At a clean stop, with every role gone: what ``_found_damage`` finds becomes tombstones now,
    so a stopped store checks as recovery would leave it (nothing is loaded when the running
    processes found nothing).  -> how many spans were buried."""
    entries = _unburied(cfg)
    if not entries:
        return 0
    commitlog = MappedFileQueue(cfg.commitlog_dir, cfg.mappedFileSizeCommitLog, True).load()
    cqs = load_all(cfg.root, cfg.mappedFileSizeConsumeQueue, True)
    try:
        end = commitlog.files[-1].end if commitlog.files else 0
        damages = _found_damage(entries, commitlog, end, [])
        if damages:
            known = (topicjournal.read(cfg.config_dir) or {}).get("topicConfigTable", {})
            _bury(cfg, damages, cqs, known)
            os.sync()                        # (the consume-queue entries it pointed at the tombstones)
        return len(damages)
    finally:
        for cq in cqs.values():
            cq.close()
        commitlog.close()


def _bury(cfg, damages: list[Damage], cqs: dict, topics: dict) -> list[tuple[int, int]]:
    """Write a tombstone over each damaged span (``store/salvage.py``), point every consume-queue
    entry into it at the tombstone, and put the span in the quarantine with its original bytes.
    -> (offset, length) of every tombstone, sorted, for re-dispatch to fill queue gaps with."""
    store_ip, store_port, _v6 = message.pack_host((cfg.brokerIP1, cfg.listenPort))
    entries, originals, buried = [], [], []
    for d in damages:
        phys, mm = d.phys, d.mf.mm
        who = None
        for (topic, qid), cq in sorted(cqs.items()):
            for q in cq.entries_within(phys, phys + d.length):
                if who is None:
                    who = salvage.Identity(topic.encode(), qid, q, source="consume queue")
                cq.rewrite(q, phys, d.length, salvage.TOMBSTONE_TAGS)
        if who is None:
            who = salvage.header_identity(mm, d.at, d.length)
            if who is not None and who.topic.decode() not in topics:
                who = None
        who = who or salvage.UNKNOWN
        if not who.store_ts:
            who.store_ts = _store_ts_after(d)
        try:
            stone = salvage.tombstone(d.length, phys, who, d.why, store_ip, store_port)
        except ValueError as e:
            log.error("CommitLog: damaged record at offset %d (%s, %d bytes) left as it is: %s",
                      phys, d.why, d.length, e)
            continue
        originals.append(bytes(mm[d.at:d.at + d.length]))
        mm[d.at:d.at + d.length] = stone
        d.mf.flush()
        buried.append((phys, d.length))
        entries.append({"offset": phys, "length": d.length, "file": d.mf.path, "fileOffset": d.at,
                        "reason": d.why, "topic": who.topic.decode(), "queueId": who.queue_id,
                        "queueOffset": who.queue_offset if who.source != "unknown" else None,
                        "identity": who.source, "foundBy": d.found_by, "time": int(time.time() * 1000)})
        log.error("CommitLog: damaged record at offset %d (%s @ %d, %d bytes: %s) of %s queue %d offset %s "
                  "replaced by a tombstone; every record after it is kept; original bytes in %s",
                  phys, d.mf.path, d.at, d.length, d.why, who.topic.decode(), who.queue_id,
                  entries[-1]["queueOffset"], quarantine.directory(cfg.root))
    if entries:
        quarantine.add(cfg.root, entries, originals)
    return sorted(buried)


def _store_ts_after(d: Damage) -> int:
    """The store time of the record after a damaged span (a tombstone's, so searches by time
    still find the queue's records in order), or 0."""
    at = d.at + d.length
    return message.store_ts_of(d.mf.mm, at) if salvage.verified(d.mf.mm, at, d.mf.start + at, d.mf.size) else 0


def _index_end(cfg, commitlog: MappedFileQueue, end: int) -> int:
    """The log's start when ``index/`` is gone while the log holds records (deleted while
    stopped: rebuilt after any exit, clean or not; re-dispatch skips what the consume queues have),
    else a large number.  Recovery leaves the directory in place, so a store whose messages have
    no keys (and so no IndexFile) is not rebuilt at every start."""
    if not cfg.messageIndexEnable or os.path.isdir(cfg.index_dir) or end <= commitlog.min_offset:
        return 2**63 - 1
    log.warning("%s is missing: rebuilding the index from the whole CommitLog", cfg.index_dir)
    return commitlog.min_offset


def _lost_queue_dirs(cfg, topics: TopicTable) -> list[str]:
    """Known topic-queues without a consume-queue directory (deleted: every queue of a topic has one,
    files or not, ``TopicTable._ensure_dirs``), as ``topic/queue``.  (A store of before 2026-11-29,
    whose empty queues had no directory, is rebuilt once.)"""
    lost = []
    for name, tc in topics.configs.items():
        if not os.path.isdir(os.path.dirname(queue_dir(cfg.root, name, 0))):
            lost.append(f"{name}/*")
            continue
        lost += [f"{name}/{q}" for q in range(queue_nums(tc)) if not os.path.isdir(queue_dir(cfg.root, name, q))]
    return lost


def _register_queue(shared, topic: str, qid: int, cq=None) -> int:
    """Boot acts as the writer for the queue table: no writer runs yet."""
    v = shared.views
    if cq is not None:     # offsets go in before the slot is published
        s = shared.queue_count()
        if s < len(v["queue_max"]):
            v["queue_max"][s], v["queue_min"][s] = cq.max_offset, cq.min_offset
    return append_queue(v, shared.control, topic.encode(), qid)


def _redispatch(cfg, shared, tombstones: list[tuple[int, int]]) -> None:
    d = DispatcherService(cfg, shared, allocate_queue=lambda t, q: _register_queue(shared, t, q),
                          tombstones=tombstones).open()
    try:
        while d.step():
            pass
    finally:
        d.close()
