"""``appliance check``: verify a stopped store end to end, offline.

Every CommitLog file has the configured size; every record parses with a good CRC and says where
it lies (PHYSICALOFFSET).  A record that does not is named (file, offset, what failed) and the
walk goes on from the next verified record (``store/salvage.py``); bytes past the last record that
no verified record follows are a torn tail (recovery cuts it).  Every dispatched record has exactly
one ConsumeQueue entry, at its QUEUEOFFSET, pointing back at it; queue offsets are dense per queue
(offsets lost in a damaged span count when their entries point at its tombstone); every UNIQ_KEY
and KEYS token is found through the IndexFiles, which must be there and of their size.
Tombstones (spans recovery quarantined) are listed apart: they are known losses, not problems.
Returns the problems found (empty = clean) and per-queue messages.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import dataclass, field

from rocketbox.store import gaps, indexfile, message, quarantine, salvage
from rocketbox.store.consumequeue import ConsumeQueue, file_size_for, load_all
from rocketbox.store.javahash import index_key_hash
from rocketbox.store.mappedfile import MappedFileQueue, is_offset_name


@dataclass
class CheckReport:
    problems: list = field(default_factory=list)
    records: int = 0
    end_offset: int = 0
    queues: dict = field(default_factory=dict)     # (topic, qid) -> [(queue_offset, phys, body)]
    tombstones: list = field(default_factory=list)  # (phys, length, topic, queue id, queue offset or None)

    @property
    def clean(self) -> bool:
        return not self.problems


def scan_commitlog(cfg, problems: list | None = None):
    """Yield (phys, Record) for every record of the log.  With ``problems``, a record that fails
    its checks is named there and the walk resumes at the next verified record, and a torn tail is
    named too; without it, the walk stops at the first bad record."""
    cl = MappedFileQueue(cfg.commitlog_dir, cfg.mappedFileSizeCommitLog, False).load()
    try:
        for step in salvage.walk(cl.files):
            mf, at = step.mf, step.at
            if step.kind == "record":
                yield mf.start + at, message.decode_record(mf.mm, at, mf.path)
            elif step.kind == "blank":
                continue
            elif problems is None:
                return
            elif step.kind == "damage":
                problems.append(f"bad record at offset {mf.start + at} ({mf.path} @ {at}): {step.why}; "
                                f"{step.length} bytes to the next verified record")
            elif step.kind == "tail" and (tail := salvage.tail_length(mf, at)):
                problems.append(f"torn tail: {tail} bytes at offset {mf.start + at} ({mf.path} @ {at}) "
                                f"past the last verified record ({step.why}); recovery cuts them")
    finally:
        cl.close()


def _file_sizes(directory: str, size: int, what: str) -> list[str]:
    """Problems of a directory of offset-named files: any not of the configured size."""
    if not os.path.isdir(directory):
        return []
    return [f"{what} file {os.path.join(directory, n)} is {os.path.getsize(os.path.join(directory, n))} bytes, "
            f"not {size}" for n in sorted(os.listdir(directory))
            if is_offset_name(n) and os.path.getsize(os.path.join(directory, n)) != size]


def check(cfg, verify_index: bool = True) -> CheckReport:
    rep = CheckReport()
    rep.problems += [g.describe() for g in _gaps(cfg)]
    if rep.problems:                # a log with holes: what recovery refuses to start on (store/gaps.py)
        return rep
    rep.problems += _file_sizes(cfg.commitlog_dir, cfg.mappedFileSizeCommitLog, "CommitLog")
    index_size = indexfile.file_size(cfg.maxHashSlotNum, cfg.maxIndexNum)
    index_paths = indexfile.list_index_files(cfg.index_dir) if verify_index else []
    for p in index_paths:
        if os.path.getsize(p) != index_size:
            rep.problems.append(f"IndexFile {p} is {os.path.getsize(p)} bytes, not {index_size}")
    index_files = [indexfile.IndexFile(p, cfg.maxHashSlotNum, cfg.maxIndexNum, False).open()
                   for p in index_paths if os.path.getsize(p) == index_size]
    cq_size = file_size_for(cfg.mappedFileSizeConsumeQueue)
    cqs: dict = {}
    offsets: dict = {}          # (topic, qid) -> every queue offset the CommitLog holds, tombstones too
    keyed = 0                   # records with index keys
    try:
        for phys, r in scan_commitlog(cfg, rep.problems):
            rep.records += 1
            rep.end_offset = phys + r.total_size
            if r.tx_type in (message.TX_PREPARED, message.TX_ROLLBACK):
                if salvage.is_tombstone(r.properties):
                    rep.tombstones.append((phys, r.total_size, r.topic, r.queue_id, None))
                continue
            key = (r.topic, r.queue_id)
            cq = cqs.get(key)
            if cq is None:
                cq = cqs[key] = ConsumeQueue(cfg.root, r.topic, r.queue_id, cq_size, False).load()
                if not cq.files.files:
                    rep.problems.append(f"{key}: no consume queue (consumequeue/{r.topic}/{r.queue_id} is missing "
                                        "or empty)")
            offsets.setdefault(key, []).append(r.queue_offset)
            e = cq.entries(r.queue_offset, 1)
            if cq.files.files and (len(e) != 1 or r.queue_offset >= cq.max_offset or int(e["phys"][0]) != phys
                                   or int(e["size"][0]) != r.total_size):
                rep.problems.append(f"{key} queue offset {r.queue_offset}: CQ entry does not point at record {phys}")
            if salvage.is_tombstone(r.properties):
                rep.tombstones.append((phys, r.total_size, r.topic, r.queue_id, r.queue_offset))
                continue
            rep.queues.setdefault(key, []).append((r.queue_offset, phys, r.body))
            keys = _index_keys(r)
            keyed += bool(keys)
            for k in keys if index_files else ():
                h = index_key_hash(f"{r.topic}#{k}")
                if not any(phys in ix.lookup(h, 0, 2**62, 2**31) for ix in index_files):
                    rep.problems.append(f"index has no entry for key {k!r} of record {phys}")
        if verify_index and cfg.messageIndexEnable and keyed and not index_paths:
            rep.problems.append(f"{cfg.index_dir} holds no IndexFile, but {keyed} records have keys "
                                "(recovery rebuilds it)")
        for key, offs in offsets.items():
            _check_dense(key, offs, cqs[key], rep.problems)
    finally:
        for cq in cqs.values():
            cq.close()
        for ix in index_files:
            ix.close()
    return rep


def _gaps(cfg) -> list:
    """The CommitLog's gaps (``store/gaps.py``), files missing at its end included."""
    cqs = load_all(cfg.root, cfg.mappedFileSizeConsumeQueue, False)
    try:
        return gaps.find(cfg.commitlog_dir, cfg.mappedFileSizeCommitLog, cqs.values())
    finally:
        for cq in cqs.values():
            cq.close()


def _check_dense(key, offs: list[int], cq: ConsumeQueue, problems: list) -> None:
    """A queue's offsets run without holes from its first, but for offsets lost in a damaged
    span whose entries point at a tombstone; the consume queue ends where they do."""
    first, held = offs[0], set(offs)
    missing = [q for q in range(first, max(offs) + 1) if q not in held]
    unmarked = [q for q in missing
                if not (len(e := cq.entries(q, 1)) == 1 and int(e["tags"][0]) == salvage.TOMBSTONE_TAGS)]
    if unmarked or len(held) != len(offs):
        problems.append(f"{key}: queue offsets are not dense (missing {unmarked[:5]})")
    if cq.files.files and cq.max_offset != max(offs) + 1:
        problems.append(f"{key}: CQ max offset {cq.max_offset}, CommitLog has {max(offs) + 1}")


def _index_keys(r) -> list[str]:
    keys = [r.properties["UNIQ_KEY"]] if r.properties.get("UNIQ_KEY") else []
    return keys + [k for k in r.properties.get("KEYS", "").split(" ") if k]


@contextlib.contextmanager
def _stopped(cfg, command: str):
    """The store's lock held (no appliance can start meanwhile): yields False, having said so, when
    a running appliance holds it."""
    if not os.path.isdir(cfg.root):
        yield True
        return
    fd = os.open(os.path.join(cfg.root, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"appliance {command}: the store is in use by a running appliance; stop it first")
            yield False
            return
        yield True
    finally:
        os.close(fd)


def accept_gap(cfg) -> int:
    """``appliance accept-gap``: the operator accepts that the CommitLog's gaps are lost; each becomes
    a filler the log's readers step over, the files after it stay readable (``store/gaps.py``)."""
    if not os.path.isdir(cfg.commitlog_dir):
        print(f"appliance accept-gap: no store at {cfg.root}")
        return 2
    with _stopped(cfg, "accept-gap") as free:
        if not free:
            return 2
        cqs = load_all(cfg.root, cfg.mappedFileSizeConsumeQueue, True)
        try:
            found = gaps.find(cfg.commitlog_dir, cfg.mappedFileSizeCommitLog, cqs.values())
            if not found:
                print("no gap in the CommitLog: nothing to accept")
                return 0
            for g in found:
                print("ACCEPTING", g.describe())
            try:
                done = gaps.fill(cfg.root, cfg.commitlog_dir, cfg.mappedFileSizeCommitLog, found, cqs)
            except gaps.CommitLogGap as e:
                print(f"appliance accept-gap: {e}")
                return 1
        finally:
            for cq in cqs.values():
                cq.close()
    lost = sum(n for _, n in done)
    print(f"{len(done)} gap(s) of {lost} bytes in all are now fillers that readers step over; every record after "
          f"them is kept and served; listed in {quarantine.directory(cfg.root)} (appliance quarantine)")
    return 0


def main(cfg) -> int:
    if not os.path.isdir(cfg.commitlog_dir) or not any(is_offset_name(n) for n in os.listdir(cfg.commitlog_dir)):
        print(f"appliance check: no store at {cfg.root}: {cfg.commitlog_dir} is missing or holds no CommitLog file")
        return 2
    with _stopped(cfg, "check") as free:
        if not free:
            return 2
        rep = check(cfg)
    print(f"{rep.records} records, CommitLog end {rep.end_offset}, {len(rep.queues)} queues")
    for p in rep.problems[:50]:
        print("PROBLEM", p)
    if len(rep.problems) > 50:
        print(f"... and {len(rep.problems) - 50} more problems")
    for phys, length, topic, qid, qoff in rep.tombstones:
        where = f"{topic} queue {qid} offset {qoff}" if qoff is not None else "unknown queue"
        print(f"QUARANTINED {length} bytes at offset {phys} ({where}): lost to damage, replaced by a tombstone")
    if rep.tombstones:
        print(f"(their original bytes: {quarantine.directory(cfg.root)})")
    for at, length in gaps.accepted(cfg.root):
        print(f"ACCEPTED GAP {length} bytes at offset {at}: missing CommitLog bytes the operator accepted to lose")
    print("clean" if rep.clean else f"{len(rep.problems)} problems")
    return 0 if rep.clean else 1
