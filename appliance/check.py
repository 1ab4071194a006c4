"""``appliance check``: verify a stopped store end to end, offline.

Every CommitLog record parses with a good CRC up to the end of the log; every dispatched record
has exactly one ConsumeQueue entry, at its QUEUEOFFSET, pointing back at it; queue offsets are
dense per queue; every UNIQ_KEY and KEYS token is found through the IndexFiles.  Returns the
problems found (empty = clean) and per-queue message counts.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from store import indexfile, message
from store.consumequeue import ConsumeQueue, file_size_for
from store.errors import CorruptData
from store.javahash import index_key_hash
from store.mappedfile import MappedFileQueue


@dataclass
class CheckReport:
    problems: list = field(default_factory=list)
    records: int = 0
    end_offset: int = 0
    queues: dict = field(default_factory=dict)     # (topic, qid) -> [(queue_offset, phys, body)]

    @property
    def clean(self) -> bool:
        return not self.problems


def scan_commitlog(cfg):
    """Yield (phys, Record) for every record of the log, stopping at its end."""
    cl = MappedFileQueue(cfg.commitlog_dir, cfg.mappedFileSizeCommitLog, False).load()
    try:
        for mf in cl.files:
            at = 0
            while at < mf.size:
                try:
                    size = message.check_record(mf.mm, at, True, mf.path)
                except CorruptData:
                    return
                if size == 0:
                    break
                yield mf.start + at, message.decode_record(mf.mm, at, mf.path)
                at += size
    finally:
        cl.close()


def check(cfg, verify_index: bool = True) -> CheckReport:
    rep = CheckReport()
    index_files = [indexfile.IndexFile(p, cfg.maxHashSlotNum, cfg.maxIndexNum, False).open()
                   for p in indexfile.list_index_files(cfg.index_dir)] if verify_index else []
    cq_size = file_size_for(cfg.mappedFileSizeConsumeQueue)
    cqs: dict = {}
    try:
        for phys, r in scan_commitlog(cfg):
            rep.records += 1
            rep.end_offset = phys + r.total_size
            if r.phys_offset != phys:
                rep.problems.append(f"record at {phys} says PHYSICALOFFSET {r.phys_offset}")
            if r.tx_type in (message.TX_PREPARED, message.TX_ROLLBACK):
                continue
            key = (r.topic, r.queue_id)
            rep.queues.setdefault(key, []).append((r.queue_offset, phys, r.body))
            cq = cqs.get(key)
            if cq is None:
                cq = cqs[key] = ConsumeQueue(cfg.root, r.topic, r.queue_id, cq_size, False).load()
            e = cq.entries(r.queue_offset, 1)
            if len(e) != 1 or r.queue_offset >= cq.max_offset or int(e["phys"][0]) != phys or int(e["size"][0]) != r.total_size:
                rep.problems.append(f"{key} queue offset {r.queue_offset}: CQ entry does not point at record {phys}")
            for k in _index_keys(r) if index_files else ():
                h = index_key_hash(f"{r.topic}#{k}")
                if not any(phys in ix.lookup(h, 0, 2**62, 2**31) for ix in index_files):
                    rep.problems.append(f"index has no entry for key {k!r} of record {phys}")
        for key, rows in rep.queues.items():
            offs = [q for q, _p, _b in rows]
            first = offs[0] if offs else 0
            if offs != list(range(first, first + len(offs))):
                rep.problems.append(f"{key}: queue offsets are not dense")
            cq = cqs[key]
            if cq.max_offset != first + len(offs):
                rep.problems.append(f"{key}: CQ max offset {cq.max_offset}, CommitLog has {first + len(offs)}")
    finally:
        for cq in cqs.values():
            cq.close()
        for ix in index_files:
            ix.close()
    return rep


def _index_keys(r) -> list[str]:
    keys = [r.properties["UNIQ_KEY"]] if r.properties.get("UNIQ_KEY") else []
    return keys + [k for k in r.properties.get("KEYS", "").split(" ") if k]


def main(cfg) -> int:
    if os.path.exists(os.path.join(cfg.root, "lock")):
        import fcntl
        fd = os.open(os.path.join(cfg.root, "lock"), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("appliance check: the store is in use by a running appliance; stop it first")
            return 2
        finally:
            os.close(fd)
    rep = check(cfg)
    print(f"{rep.records} records, CommitLog end {rep.end_offset}, {len(rep.queues)} queues")
    for p in rep.problems[:50]:
        print("PROBLEM", p)
    print("clean" if rep.clean else f"{len(rep.problems)} problems")
    return 0 if rep.clean else 1
