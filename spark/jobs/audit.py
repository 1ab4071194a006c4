"""``audit``: the at-scale twin of ``appliance check``, partitioned by file.

Every CommitLog record's magic, CRC and PHYSICALOFFSET (one task per CommitLog file, the walk
resuming past damage as recovery does); every consume-queue entry against the record it points at
(the records' (topic, queue, queue offset, offset, size) joined with the entries'); every
IndexFile entry against a record start.  Each inconsistency is a row: kind, file, offset, what.
Tombstones (damage already replaced and quarantined) are listed apart: known losses, not problems.

    spark-submit spark/jobs/audit.py --path STORE [--limit 100]
    appliance spark audit --path STORE
"""
from __future__ import annotations

import argparse
import os
import sys

if __package__ in (None, ""):                 # run as a file (spark-submit): the repository's packages
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

PROBLEMS = "kind string, file string, offset long, what string"
TOMBSTONES = "file string, offset long, topic string, queueId int, reason string"


def scan_commitlog_file(root: str, start: int):
    """Rows of one CommitLog file: ("record", topic, queue id, queue offset, phys, size) for each
    verified record, ("problem", file, offset, what) for each damaged span."""
    from rocketbox.spark.storefiles import Store
    from rocketbox.store import message, salvage
    from rocketbox.store.mappedfile import MappedFileQueue
    directory = Store(root).commitlog
    size = os.path.getsize(os.path.join(directory, f"{start:020d}"))
    files = MappedFileQueue(directory, size, False).load()
    try:
        i = next(k for k, f in enumerate(files.files) if f.start == start)
        for step in salvage.walk(files.files, i, 0, last=i):
            mf, at = step.mf, step.at
            if step.kind == "tail" and (tail := salvage.tail_length(mf, at)):
                yield ("problem", mf.path, at, f"torn tail: {tail} bytes past the last verified record ({step.why})")
            elif step.kind == "damage":
                yield ("problem", mf.path, at, f"bad record: {step.why}; {step.length} bytes to the next verified record")
            elif step.kind == "record":
                r = message.decode_record(mf.mm, at, mf.path)
                if r.tx_type not in (message.TX_PREPARED, message.TX_ROLLBACK):
                    yield ("record", r.topic, r.queue_id, r.queue_offset, mf.start + at, step.length)
                if salvage.is_tombstone(r.properties):
                    yield ("tombstone", mf.path, at, r.topic, r.queue_id, r.properties[salvage.TOMBSTONE_PROPERTY])
    finally:
        files.close()


def consume_queue_entries(root: str, topic: str, qid: int):
    """(topic, queue id, queue offset, phys, size, file) of each valid entry of a queue (blank
    entries in front of a late first file left out)."""
    from rocketbox.spark import storefiles
    store = storefiles.Store(root)
    lo, hi = store.bounds(topic, qid)
    for at in range(lo, hi, 65_536):
        e = store.entries(topic, qid, at, min(at + 65_536, hi))
        for k, (phys, size) in enumerate(zip(e["phys"].tolist(), e["size"].tolist())):
            yield (topic, qid, at + k, phys, size)


def index_entries(path: str, slots: int, entries: int):
    """(file, entry position, phys) of each IndexFile entry."""
    from rocketbox.store import indexfile
    ix = indexfile.IndexFile(path, slots, entries, False).open()
    try:
        n = ix.h("index_count")
        phys = ix.entries["phys"][1:n].astype("int64").tolist()
        for k, p in enumerate(phys, start=1):
            yield (path, k, p)
    finally:
        ix.close()


def audit(spark, root: str):
    """A DataFrame of every inconsistency found (``PROBLEMS``)."""
    return report(spark, root)[0]


def report(spark, root: str):
    """-> (every inconsistency found (``PROBLEMS``), every tombstone (``TOMBSTONES``): damage recovery
    or a read already replaced and quarantined, a known loss and not a problem; consumers and the
    Spark source skip them)."""
    from rocketbox.spark import storefiles
    store = storefiles.Store(root)
    sc = spark.sparkContext
    starts = [s for s, _p in storefiles._files(store.commitlog)]
    scanned = sc.parallelize(starts, max(1, len(starts))).flatMap(lambda s: scan_commitlog_file(root, s)).cache()
    tombstones = spark.createDataFrame(scanned.filter(lambda r: r[0] == "tombstone").map(lambda r: r[1:]), TOMBSTONES)
    problems = scanned.filter(lambda r: r[0] == "problem").map(lambda r: (r[0] + ": commitlog", r[1], r[2], r[3]))
    records = spark.createDataFrame(scanned.filter(lambda r: r[0] == "record").map(lambda r: r[1:]),
                                    "topic string, queueId int, queueOffset long, phys long, size int")
    queues = [(t, q) for t in store.topics() for q in store.queues(t)]
    entries = spark.createDataFrame(
        sc.parallelize(queues, max(1, min(len(queues), 64))).flatMap(lambda tq: consume_queue_entries(root, *tq)),
        "topic string, queueId int, queueOffset long, cqPhys long, cqSize int")
    joined = records.join(entries, ["topic", "queueId", "queueOffset"], "full_outer")
    cq_root = os.path.join(root, "consumequeue")
    bad_cq = joined.where("phys IS NULL OR cqPhys IS NULL OR phys != cqPhys OR size != cqSize").rdd.map(
        lambda r: ("problem: consume queue", os.path.join(cq_root, r.topic, str(r.queueId)), int(r.queueOffset),
                   "entry points at no record" if r.phys is None else "record has no entry" if r.cqPhys is None
                   else f"entry says record {r.cqPhys} ({r.cqSize} bytes), the record is at {r.phys} ({r.size} bytes)"))
    index_dir = os.path.join(root, "index")
    slots, count = store.index_geometry()
    paths = [os.path.join(index_dir, n) for n in sorted(os.listdir(index_dir))] if os.path.isdir(index_dir) else []
    from rocketbox.store import indexfile
    paths = [p for p in paths if os.path.getsize(p) == indexfile.file_size(slots, count)]
    ix = spark.createDataFrame(sc.parallelize(paths, max(1, len(paths))).flatMap(lambda p: index_entries(p, slots, count)),
                               "file string, position long, ixPhys long")
    bad_ix = ix.join(records.select("phys"), ix.ixPhys == records.phys, "left_anti").rdd.map(
        lambda r: ("problem: index", r.file, int(r.position), f"entry points at {r.ixPhys}, where no record starts"))
    return spark.createDataFrame(problems.union(bad_cq).union(bad_ix), PROBLEMS), tombstones


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="audit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--path", required=True, help="the store's storePathRootDir")
    ap.add_argument("--limit", type=int, default=100, help="problems printed at most")
    args = ap.parse_args(argv)
    from rocketbox.spark import session
    spark = session("rocketbox-audit")
    try:
        problems, tombstones = report(spark, args.path)
        found = problems.orderBy("kind", "file", "offset").collect()
        buried = tombstones.orderBy("file", "offset").collect()
    finally:
        spark.stop()
    for t in buried:
        print(f"tombstone: {t.file} at {t.offset}: {t.topic} queue {t.queueId}, lost to damage ({t.reason}); "
              "skipped by consumers and the Spark source")
    for r in found[:args.limit]:
        print(f"{r.kind}: {r.file} at {r.offset}: {r.what}")
    print(f"audit of {args.path}: {len(found)} problems" + (f" ({args.limit} shown)" if len(found) > args.limit else ""))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
