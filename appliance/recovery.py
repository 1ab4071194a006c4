"""Boot recovery: bring the store files to a consistent state and initialise the shared offsets,
before any role starts (FACTS §6).  Runs in the supervisor (or ``appliance run recover``), alone.

1. ``abort`` present => the last exit was abnormal.
2. Load topics.json into the shared topic table, the CommitLog files, every consume queue
   (each finds the end of its valid entries) and the checkpoint.
3. Scan the CommitLog (magic, lengths, CRC): a normal restart from the 3rd-from-last file, an
   abnormal one from the newest file whose first record is older than the checkpoint's
   min timestamp.  The first bad record ends the log: everything past it is cut.
4. Consume queues and index files that point past the cut are truncated / deleted.
5. Re-dispatch from the earliest point the derived files may lack: the largest CQ end (as
   RocketMQ), the abnormal scan start, the start of a deleted index file, or the whole log when a
   known topic-queue lost its consume-queue directory.  The dispatcher code does it, in-process.
6. Publish written / flushed / dispatched and the queue table; mark the state recovered.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from dispatcher.service import DispatcherService
from shm.layout import C
from shm.tables import append_queue
from store import indexfile, message
from store.checkpoint import Checkpoint
from store.consumequeue import ConsumeQueue, file_size_for, queue_dir
from store.errors import CorruptData
from store.mappedfile import MappedFileQueue
from writer.groups import ConsumerOffsets
from writer.topics import TopicTable, queue_nums

log = logging.getLogger("rocketbox.recovery")


@dataclass
class RecoveryReport:
    abnormal: bool
    scan_from: int
    end_offset: int          # CommitLog end after recovery
    cut_bytes: int           # bytes of torn/corrupt tail removed (within the last file)
    redispatch_from: int
    queues: int


def _scan(commitlog: MappedFileQueue, start_index: int, check_crc: bool) -> int:
    """Walk records from file ``start_index`` until the first bad one; returns the end offset."""
    files = commitlog.files
    pos = files[start_index].start
    for mf in files[start_index:]:
        if mf.start != pos:
            break
        at = 0
        while at < mf.size:
            try:
                size = message.check_record(mf.mm, at, check_crc, mf.path)
            except CorruptData:
                return mf.start + at
            if size == 0:            # BLANK: the rest of the file is filler
                at = mf.size
                break
            at += size
        pos = mf.start + at
    return pos


def _abnormal_start(commitlog: MappedFileQueue, min_ts: int) -> int:
    for i in range(len(commitlog.files) - 1, -1, -1):
        mm = commitlog.files[i].mm
        try:
            if message.check_record(mm, 0, False) > 0:
                store_ts = int.from_bytes(mm[message.store_ts_at(int.from_bytes(mm[36:40], "big", signed=True)):][:8], "big")
                if store_ts != 0 and store_ts <= min_ts:
                    return i
        except CorruptData:
            continue
    return 0


def _load_queues(cfg) -> dict:
    cqs = {}
    base = os.path.join(cfg.root, "consumequeue")
    if not os.path.isdir(base):
        return cqs
    size = file_size_for(cfg.mappedFileSizeConsumeQueue)
    for topic in sorted(os.listdir(base)):
        for qid in sorted(os.listdir(os.path.join(base, topic))):
            path = os.path.join(base, topic, qid)
            if qid.lstrip("-").isdigit() and os.listdir(path):      # empty directories hold nothing
                cqs[(topic, int(qid))] = ConsumeQueue(cfg.root, topic, int(qid), size, True).load()
    return cqs


def recover(cfg, shared) -> RecoveryReport:
    ctl, views = shared.control, shared.views
    abnormal = os.path.exists(os.path.join(cfg.root, "abort"))
    os.makedirs(cfg.root, exist_ok=True)
    topics = TopicTable(cfg, views, ctl)
    topics.load()
    ConsumerOffsets(cfg, views, ctl).load()
    checkpoint = Checkpoint(os.path.join(cfg.root, "checkpoint")).load()
    commitlog = MappedFileQueue(cfg.commitlog_dir, cfg.mappedFileSizeCommitLog, True).load()
    cqs = _load_queues(cfg)
    try:
        files = commitlog.files
        if not files:
            start_i, end = 0, 0
            for cq in cqs.values():
                cq.truncate_phys(0)
        else:
            start_i = _abnormal_start(commitlog, checkpoint.min_timestamp) if abnormal else max(0, len(files) - 3)
            end = _scan(commitlog, start_i, cfg.checkCRCOnRecover)
        scan_from = files[start_i].start if files else 0
        last_end = files[-1].end if files else 0
        cut = 0
        if files and end < last_end:
            holder = commitlog.file_for(end) or commitlog.file_for(end - 1)
            cut = _nonzero_tail(holder, end - holder.start) if holder else 0
            commitlog.truncate(end)
            if cut:
                log.warning("CommitLog: cut %d bytes of torn or corrupt data at offset %d", cut, end)
        for cq in cqs.values():
            if cq.max_phys > end:
                cq.truncate_phys(end)
        redispatch = max((cq.max_phys for cq in cqs.values()), default=0)
        if abnormal and files:
            redispatch = min(redispatch, files[start_i].start)
        redispatch = min(redispatch, _trim_index(cfg, checkpoint, abnormal, end))
        if files and _lost_queue_dirs(cfg, topics):
            log.warning("a known topic-queue has no consume-queue directory: rebuilding from the whole CommitLog")
            redispatch = commitlog.min_offset
        redispatch = max(min(redispatch, end), commitlog.min_offset)
        for (topic, qid), cq in sorted(cqs.items()):
            _register_queue(shared, topic, qid, cq)
        ctl[C.MIN_PHYS] = commitlog.min_offset
        ctl[C.WRITTEN] = ctl[C.FLUSHED] = end
        ctl[C.JOURNAL_WRITTEN] = -1
        ctl[C.DISPATCHED] = redispatch
        for mf in commitlog.files[-1:]:
            mf.flush()
    finally:
        for cq in cqs.values():
            cq.close()
        commitlog.close()
    _redispatch(cfg, shared)
    topics.ensure_queue_dirs()      # so that a deleted directory is noticed next time
    ctl[C.RECOVERED] = 1
    return RecoveryReport(abnormal, scan_from, end, cut, redispatch, shared.queue_count())


def _nonzero_tail(mf, at: int) -> int:
    import numpy as np
    tail = mf.view[at:]
    nz = np.flatnonzero(tail)
    return int(nz[-1]) + 1 if nz.size else 0


def _trim_index(cfg, checkpoint, abnormal: bool, end: int) -> int:
    """Delete index files that may hold entries the CommitLog no longer has; returns the offset
    from which re-dispatch must rebuild them (a large number when none was deleted)."""
    rebuild_from = 2**63 - 1
    for path in indexfile.list_index_files(cfg.index_dir):
        ix = indexfile.IndexFile(path, cfg.maxHashSlotNum, cfg.maxIndexNum, False).open()
        try:
            stale = ix.h("end_phys") >= end or (abnormal and ix.h("end_ts") > checkpoint.index_ts)
            begin = ix.h("begin_phys")
        finally:
            ix.close()
        if stale:
            os.unlink(path)
            rebuild_from = min(rebuild_from, begin)
    return rebuild_from


def _lost_queue_dirs(cfg, topics: TopicTable) -> bool:
    for name, tc in topics.configs.items():
        if any(not os.path.isdir(queue_dir(cfg.root, name, q)) for q in range(queue_nums(tc))):
            return True
    return False


def _register_queue(shared, topic: str, qid: int, cq=None) -> int:
    """Boot acts as the writer for the queue table: no writer runs yet."""
    v = shared.views
    if cq is not None:     # offsets go in before the slot is published
        s = shared.queue_count()
        if s < len(v["queue_max"]):
            v["queue_max"][s], v["queue_min"][s] = cq.max_offset, cq.min_offset
    return append_queue(v, shared.control, topic.encode(), qid)


def _redispatch(cfg, shared) -> None:
    d = DispatcherService(cfg, shared, allocate_queue=lambda t, q: _register_queue(shared, t, q)).open()
    try:
        while d.step():
            pass
    finally:
        d.close()
