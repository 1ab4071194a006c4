"""The store's files as Spark reads them, without Spark: which queues a store holds and how far each
can be read (planning), and one queue's slice of messages as an Arrow record batch (a partition's
read).  Everything is read-only, through mmap: a store the appliance is running, a stopped one, a
copy, or one the real RocketMQ 4.9.8 broker wrote.

**The consistent prefix.** A queue's readable end is fixed when a job plans: the consume queue's
valid entries then (the dispatcher writes an entry's size last, after the record it points at is
in the CommitLog, so every valid entry's record is whole), and, when the appliance runs with
SYNC_FLUSH (``run/store.json`` says so) or the job asks ``flushedOnly``, no entry whose record was
stored after the checkpoint's last flushed store time.  A partition reads [start, end) of one
queue and never past it, so a job sees a prefix of every queue, never a torn record.

Columns: ``SCHEMA`` (the issue's list).  A record whose body is compressed (sysflag bit 0) is
inflated.  A record that does not parse (bad magic, a size that disagrees with its consume-queue
entry) raises ``CorruptRecord`` naming the CommitLog file and offset, or is left out with
``on_corrupt="skip"``.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketbox.store import message
from rocketbox.store.consumequeue import BLANK_ENTRY, ENTRY, ENTRY_SIZE, read_entries, valid_prefix
from rocketbox.store.javahash import string_hash
from rocketbox.store.salvage import TOMBSTONE_TAGS

SCHEMA = ("topic string, queueId int, queueOffset long, physicalOffset long, storeTimestamp timestamp, "
          "bornTimestamp timestamp, bornHost string, storeHost string, msgId string, uniqKey string, tags string, "
          "keys string, properties map<string,string>, reconsumeTimes int, sysFlag int, bodyCRC int, body binary, "
          "brokerName string")
ARROW_SCHEMA = pa.schema([
    ("topic", pa.string()), ("queueId", pa.int32()), ("queueOffset", pa.int64()), ("physicalOffset", pa.int64()),
    ("storeTimestamp", pa.timestamp("us", tz="UTC")), ("bornTimestamp", pa.timestamp("us", tz="UTC")),
    ("bornHost", pa.string()), ("storeHost", pa.string()), ("msgId", pa.string()), ("uniqKey", pa.string()),
    ("tags", pa.string()), ("keys", pa.string()), ("properties", pa.map_(pa.string(), pa.string())),
    ("reconsumeTimes", pa.int32()), ("sysFlag", pa.int32()), ("bodyCRC", pa.int32()), ("body", pa.binary()),
    ("brokerName", pa.string())])
RECORD_COLUMNS = tuple(ARROW_SCHEMA.names[:-1])   # what a record holds; brokerName is the store's (spark/source.py)
CHECKPOINT_TS_AT = 0          # the checkpoint file's physicMsgTimestamp (FACTS §5.4)


class NotAStore(ValueError):
    """The path holds no store."""


class CorruptRecord(ValueError):
    def __init__(self, path: str, offset: int, what: str):
        super().__init__(f"{path} at offset {offset}: {what}")
        self.path, self.offset = path, offset


def _files(directory: str) -> list[tuple[int, str]]:
    """(start offset, path) of the 20-digit files in ``directory``, in order."""
    try:
        names = sorted(n for n in os.listdir(directory) if len(n) == 20 and n.isdigit())
    except FileNotFoundError:
        return []
    return [(int(n), os.path.join(directory, n)) for n in names]


class Store:
    """A store root (``storePathRootDir``) as a job plans over it."""

    def __init__(self, root: str):
        """``root``: the store's storePathRootDir.  Its CommitLog is ``root/commitlog``, or where
        the appliance that owns the store keeps it (``storePathCommitLog``, in ``run/store.json``)."""
        self.root = root
        self.run = self._run_info()
        self.cq_root = os.path.join(root, "consumequeue")
        self.commitlog = self.run.get("storePathCommitLog") or os.path.join(root, "commitlog")
        if not os.path.isdir(self.commitlog) or not os.path.isdir(self.cq_root):
            raise NotAStore(f"{root} is not a RocketMQ store: it has no consumequeue/ directory, or no CommitLog "
                            f"directory at {self.commitlog}")

    def _run_info(self) -> dict:
        """``run/store.json``: what the appliance that owns the store says about its files ({}
        for a copy, or a store RocketMQ wrote)."""
        try:
            with open(os.path.join(self.root, "run", "store.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def topics(self) -> list[str]:
        return sorted(t for t in os.listdir(self.cq_root) if os.path.isdir(os.path.join(self.cq_root, t)))

    def matching(self, names: str | None = None, pattern: str | None = None) -> list[str]:
        """The topics ``names`` (a comma list) or ``pattern`` (a regular expression, whole name)
        name; ValueError naming a listed topic the store does not have."""
        have = self.topics()
        if pattern:
            rx = re.compile(pattern)
            return [t for t in have if rx.fullmatch(t)]
        wanted = [t.strip() for t in (names or "").split(",") if t.strip()]
        if not wanted:
            raise ValueError("say which topics to read: option 'topic' (a name or a comma list) or 'topicPattern'")
        missing = [t for t in wanted if t not in have]
        if missing:
            raise ValueError(f"topic {', '.join(missing)} does not exist in the store at {self.root}")
        return wanted

    def queues(self, topic: str) -> list[int]:
        d = os.path.join(self.cq_root, topic)
        return sorted(int(q) for q in os.listdir(d) if q.isdigit())

    def flushed_ts(self) -> int | None:
        """The checkpoint's physicMsgTimestamp: records stored at or before it are on disk."""
        try:
            with open(os.path.join(self.root, "checkpoint"), "rb") as f:
                raw = f.read(8)
        except FileNotFoundError:
            return None
        return int.from_bytes(raw, "big") if len(raw) == 8 else None

    def sync_flush(self) -> bool:
        """Whether the appliance that owns this store runs with SYNC_FLUSH (``run/store.json``)."""
        return self.run.get("flushDiskType") == "SYNC_FLUSH"

    def index_geometry(self) -> tuple[int, int]:
        """(maxHashSlotNum, maxIndexNum) of the store's IndexFiles: ``run/store.json``'s, else
        RocketMQ's defaults."""
        try:
            return int(self.run["maxHashSlotNum"]), int(self.run["maxIndexNum"])
        except (ValueError, KeyError):
            return 5_000_000, 20_000_000

    def bounds(self, topic: str, qid: int) -> tuple[int, int]:
        """The queue's [min, max) offsets now: its first file's start (past the blank entries in
        front of a queue whose first file starts late) and its valid entries' end.  Each file is
        read up to its first invalid entry only (``valid_prefix``): planning over 100,000 queues
        reads a page of each, not their 6 MB files."""
        files = _files(os.path.join(self.cq_root, topic, str(qid)))
        if not files:
            return 0, 0
        lo = hi = files[0][0] // ENTRY_SIZE
        valid_first = 0
        for start, path in files:
            per_file = os.path.getsize(path) // ENTRY_SIZE
            n, _last = valid_prefix(path, per_file * ENTRY_SIZE)
            valid_first = valid_first or n
            hi = start // ENTRY_SIZE + n
            if n < per_file:
                break
        first = read_entries(files[0][1], 0, valid_first)
        blank = (first["size"] == BLANK_ENTRY[1]) & (first["phys"] == 0)
        lo += len(first) if blank.all() else int(np.argmin(blank))
        return min(lo, hi), hi

    def entries(self, topic: str, qid: int, start: int, end: int) -> np.ndarray:
        """Consume-queue entries [start, end) of a queue (a copy, read with ``pread``)."""
        out, at = [], start
        for fstart, path in _files(os.path.join(self.cq_root, topic, str(qid))):
            count = os.path.getsize(path) // ENTRY_SIZE
            first = fstart // ENTRY_SIZE
            if first + count <= at or first >= end:
                continue
            out.append(read_entries(path, max(at - first, 0), min(end - first, count)))
            at = first + max(at - first, 0) + len(out[-1])
        return np.concatenate(out) if out else np.empty(0, ENTRY)

    def offset_at_time(self, topic: str, qid: int, ts_ms: int, lo: int, hi: int) -> int:
        """The first queue offset in [lo, hi) whose record was stored at ``ts_ms`` or later (hi
        when none): a binary search over the records' store times, which only grow along a queue."""
        reader = CommitLog(self.commitlog)
        try:
            while lo < hi:
                mid = (lo + hi) // 2
                e = self.entries(topic, qid, mid, mid + 1)
                if not len(e) or reader.store_ts(int(e["phys"][0])) < ts_ms:
                    lo = mid + 1
                else:
                    hi = mid
        finally:
            reader.close()
        return lo


class CommitLog:
    """Read-only maps of the CommitLog files, opened as records are asked for."""

    def __init__(self, directory: str):
        self.files = _files(directory)
        if not self.files:
            raise NotAStore(f"{directory} holds no CommitLog files")
        self.file_size = os.path.getsize(self.files[0][1])
        self.maps: dict[int, np.memmap] = {}

    def path_of(self, phys: int) -> str:
        return os.path.join(os.path.dirname(self.files[0][1]), f"{phys - phys % self.file_size:020d}")

    def view(self, base: int) -> np.ndarray:
        m = self.maps.get(base)
        if m is None:
            m = self.maps[base] = np.memmap(self.path_of(base), dtype=np.uint8, mode="r")
        return m

    def store_ts(self, phys: int) -> int:
        return message.store_ts_of(self.view(phys - phys % self.file_size), phys % self.file_size)

    def gather(self, phys: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The records at ``phys`` (``size`` bytes each) copied into one buffer -> (buffer, each
        record's start in it)."""
        parts, starts, at = [], np.empty(len(phys), np.int64), 0
        base = phys - phys % self.file_size
        for i, (b, p, n) in enumerate(zip(base.tolist(), phys.tolist(), size.tolist())):
            v = self.view(b)
            parts.append(v.data[p - b:p - b + n])
            starts[i] = at
            at += n
        return np.frombuffer(b"".join(parts), np.uint8), starts

    def close(self) -> None:
        self.maps.clear()


def _be(buf: np.ndarray, at: np.ndarray, width: int, dtype: str) -> np.ndarray:
    """Big-endian integers of ``width`` bytes at each position ``at`` of ``buf``."""
    return buf[at[:, None] + np.arange(width)].copy().view(dtype).ravel().astype(dtype.replace(">", "<"))


def _hosts(raw: np.ndarray) -> pa.Array:
    """'a.b.c.d:port' of each 8-byte (IPv4, port) row, formatted once per distinct host."""
    keys = raw.copy().view(np.uint64).ravel()
    uniq, inverse = np.unique(keys, return_inverse=True)
    names = []
    for k in uniq.tolist():
        b = int(k).to_bytes(8, "little")
        names.append(f"{b[0]}.{b[1]}.{b[2]}.{b[3]}:{int.from_bytes(b[4:], 'big')}")
    return pc.take(pa.array(names, pa.string()), pa.array(inverse.ravel()))


def _strings(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> pa.Array:
    """A string array of the byte ranges [starts, starts + lens) of ``buf``."""
    return _binary(buf, starts, lens).cast(pa.string())


def _binary(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> pa.Array:
    mv = buf.data
    data = b"".join([mv[s:s + n] for s, n in zip(starts.tolist(), lens.tolist())])
    offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    return pa.Array.from_buffers(pa.large_binary(), len(lens), [None, pa.py_buffer(offsets), pa.py_buffer(data)]) \
        .cast(pa.binary())


def _properties(props: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    """The map of each record's properties (``name\\x01value\\x02...``; a pair with an empty value
    left out, as Java's string2messageProperties does), and its TAGS, KEYS and UNIQ_KEY."""
    n = len(props)
    pairs = pc.split_pattern(props, "\x02")
    parent = pc.list_parent_indices(pairs).to_numpy()
    flat = pc.list_flatten(pairs)
    kv = pc.split_pattern(flat, "\x01", max_splits=1)
    sizes = pc.list_value_length(kv).to_numpy(zero_copy_only=False)
    keep = sizes == 2
    kv = kv.filter(pa.array(keep))
    parent = parent[keep]
    keys, values = pc.list_element(kv, 0), pc.list_element(kv, 1)
    good = pc.greater(pc.utf8_length(values), 0).to_numpy(zero_copy_only=False) & \
        pc.greater(pc.utf8_length(keys), 0).to_numpy(zero_copy_only=False)
    keys, values, parent = keys.filter(pa.array(good)), values.filter(pa.array(good)), parent[good]
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(np.bincount(parent, minlength=n), out=offsets[1:])
    out = pa.MapArray.from_arrays(pa.array(offsets), keys, values)
    named = []
    for name in ("TAGS", "KEYS", "UNIQ_KEY"):
        hit = np.flatnonzero(pc.equal(keys, name).to_numpy(zero_copy_only=False))
        pick = np.full(n, -1, np.int64)
        pick[parent[hit]] = hit
        named.append(pc.take(values, pa.array(pick, mask=pick < 0)))
    return out, named[0], named[1], named[2]


def read_batches(store_root: str, topic: str, qid: int, start: int, end: int, *, flushed_ts: int | None = None,
                 tags=None, on_corrupt: str = "fail", names: tuple[str, ...] | None = None, chunk: int = 8192):
    """Messages [start, end) of a queue as record batches of at most ``chunk`` rows (columns
    ``names``, default all), read in place from the mapped CommitLog files; with ``flushed_ts``,
    none stored after it (the queue's prefix up to it); with ``tags`` (a set of tag strings), only
    messages with one of them: entries whose tag hash matches none are left out before their
    records are read, then the strings are compared."""
    store = Store(store_root)
    log = CommitLog(store.commitlog)
    want = names or RECORD_COLUMNS
    cols = want if tags is None or "tags" in want else want + ("tags",)
    try:
        for at_off in range(start, end, chunk):
            e = store.entries(topic, qid, at_off, min(at_off + chunk, end))
            bad = np.flatnonzero((e["size"] <= 0) | (e["phys"] < 0))
            if bad.size:
                e = e[:int(bad[0])]                  # the queue ends there (as planned, or still being written)
            qoff = np.arange(at_off, at_off + len(e), dtype=np.int64)
            real = ~((e["size"] == BLANK_ENTRY[1]) & (e["phys"] == 0)) & (e["tags"] != TOMBSTONE_TAGS)  # (what pulls skip)
            if tags is not None:
                real &= np.isin(e["tags"].astype(np.int64), [string_hash(t) for t in tags])
            phys, size, qoff = e["phys"][real].astype(np.int64), e["size"][real].astype(np.int64), qoff[real]
            base = phys - phys % log.file_size
            for b in np.unique(base).tolist():        # in place, file by file (a chunk rarely spans two)
                mine = base == b
                batch, past = _read_in(log, b, phys[mine], size[mine], qoff[mine], topic, qid, flushed_ts, on_corrupt, cols)
                if tags is not None:
                    batch = batch.filter(pc.is_in(batch.column("tags"), pa.array(sorted(tags), pa.string())))
                    if "tags" not in want:
                        batch = batch.select(list(want))
                if batch.num_rows:
                    yield batch
                if past:
                    return
            if bad.size:
                return
    finally:
        log.close()


def _read_in(log: CommitLog, base: int, phys, size, qoff, topic, qid, flushed_ts, on_corrupt, names):
    """One CommitLog file's records of a chunk -> (batch, whether the flushed bound cut it)."""
    buf, at = log.view(base), phys - base
    if len(at) and int((at + size).max()) > len(buf):
        raise CorruptRecord(log.path_of(base), int(at.max()), "a consume-queue entry points past the file's end")
    ok = _check(buf, at, size, phys, log, on_corrupt)
    if not ok.all():
        phys, at, qoff = phys[ok], at[ok], qoff[ok]
    sys_flag = _be(buf, at + message.SYSFLAG_AT, 4, ">i4")
    store_ts = _be(buf, at + message.STORE_TS_AT + np.where(sys_flag & message.BORNHOST_V6, message.HOST_V6_EXTRA, 0), 8, ">i8")
    past = False
    if flushed_ts is not None:
        within = store_ts <= flushed_ts
        if not within.all():
            cut = int(np.argmin(within))              # store times only grow along a queue: a prefix
            phys, at, qoff, sys_flag, store_ts, past = phys[:cut], at[:cut], qoff[:cut], sys_flag[:cut], store_ts[:cut], True
    return _columns(buf, at, phys, qoff, sys_flag, store_ts, topic, qid, names), past


def read_batch(store_root: str, topic: str, qid: int, start: int, end: int, **kw) -> pa.RecordBatch:
    """``read_batches`` as one batch."""
    schema = pa.schema([ARROW_SCHEMA.field(c) for c in kw.get("names") or RECORD_COLUMNS])
    batches = pa.Table.from_batches(list(read_batches(store_root, topic, qid, start, end, **kw)), schema) \
        .combine_chunks().to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema)


def _check(buf, at, size, phys, log: CommitLog, on_corrupt: str) -> np.ndarray:
    """Records whose TOTALSIZE and MAGIC agree with their entries; the others raise, or are left
    out with ``on_corrupt="skip"``."""
    total = _be(buf, at, 4, ">i4")
    magic = _be(buf, at + message.MAGIC_AT, 4, ">i4")
    ok = (total == size) & (magic == message.MAGIC)
    if not ok.all() and on_corrupt != "skip":
        i = int(np.argmin(ok))
        p = int(phys[i])
        raise CorruptRecord(log.path_of(p), p % log.file_size,
                            f"no message record where the consume queue points (size {int(total[i])}, magic "
                            f"{int(magic[i]) & 0xFFFFFFFF:#x}; expected size {int(size[i])}); "
                            "option onCorruptRecord=skip leaves such records out")
    return ok


def _columns(buf, at, phys, qoff, sys_flag, store_ts, topic: str | None, qid: int | None,
             names: tuple[str, ...] | None = None) -> pa.RecordBatch:
    """The batch (columns ``names``, default all) of the records at ``at`` in ``buf``; ``topic``
    and ``qid`` None: each record's own (and its own queue offset), for records not read through
    one queue.  Only the asked columns are built (the body and the property map cost the most)."""
    names = names or RECORD_COLUMNS
    n = len(at)
    v6 = (sys_flag & (message.BORNHOST_V6 | message.STOREHOST_V6)) != 0
    if v6.any():
        return _columns_slow(buf, at, phys, qoff, topic, qid).select(list(names))
    body_len = _be(buf, at + message.BODY_LEN_AT, 4, ">i4").astype(np.int64)
    topic_at = at + message.HEADER_V4_SIZE + body_len
    memo: dict = {}

    def props():
        if "p" not in memo:
            topic_len = buf[topic_at].astype(np.int64)
            props_at = topic_at + 1 + topic_len + 2
            memo["p"] = _properties(_strings(buf, props_at, _be(buf, props_at - 2, 2, ">i2").astype(np.int64)))
        return memo["p"]

    def body():
        out = _binary(buf, at + message.HEADER_V4_SIZE, body_len)
        if (sys_flag & message.COMPRESSED).any():
            raw = out.to_pylist()
            for i in np.flatnonzero(sys_flag & message.COMPRESSED).tolist():
                raw[i] = zlib.decompress(raw[i])
            out = pa.array(raw, pa.binary())
        return out

    def msg_id():
        store = buf[(at + message.STORE_HOST_AT)[:, None] + np.arange(8)]
        ids = np.concatenate([store, phys.astype(">i8").view(np.uint8).reshape(-1, 8)], axis=1)
        return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(np.arange(n + 1, dtype=np.int32) * 32),
                                                      pa.py_buffer(ids.tobytes().hex().upper().encode())])

    build = {
        "topic": lambda: pa.array([topic] * n, pa.string()) if topic is not None
        else _strings(buf, topic_at + 1, buf[topic_at].astype(np.int64)),
        "queueId": lambda: pa.array(np.full(n, qid, np.int32)) if qid is not None
        else pa.array(_be(buf, at + message.QUEUE_ID_AT, 4, ">i4")),
        "queueOffset": lambda: pa.array(qoff if qid is not None else _be(buf, at + message.QUEUE_OFFSET_AT, 8, ">i8")),
        "physicalOffset": lambda: pa.array(phys),
        "storeTimestamp": lambda: pa.array(store_ts * 1000, pa.timestamp("us", tz="UTC")),
        "bornTimestamp": lambda: pa.array(_be(buf, at + message.BORN_TS_AT, 8, ">i8") * 1000, pa.timestamp("us", tz="UTC")),
        "bornHost": lambda: _hosts(buf[(at + message.BORN_HOST_AT)[:, None] + np.arange(8)]),
        "storeHost": lambda: _hosts(buf[(at + message.STORE_HOST_AT)[:, None] + np.arange(8)]),
        "msgId": msg_id,
        "uniqKey": lambda: props()[3], "tags": lambda: props()[1], "keys": lambda: props()[2],
        "properties": lambda: props()[0],
        "reconsumeTimes": lambda: pa.array(_be(buf, at + message.RECONSUME_AT, 4, ">i4")),
        "sysFlag": lambda: pa.array(sys_flag.astype(np.int32)),
        "bodyCRC": lambda: pa.array(_be(buf, at + message.BODY_CRC_AT, 4, ">i4")),
        "body": body,
    }
    return pa.RecordBatch.from_arrays([build[c]() for c in names], schema=pa.schema([ARROW_SCHEMA.field(c) for c in names]))


def _columns_slow(buf, at, phys, qoff, topic: str | None, qid: int | None) -> pa.RecordBatch:
    """Any record, IPv6 hosts included, one at a time (``message.decode_record``)."""
    rows = [message.decode_record(buf[a:a + int.from_bytes(buf[a:a + 4].tobytes(), "big")].tobytes()) for a in at.tolist()]
    body = [zlib.decompress(r.body) if r.sys_flag & message.COMPRESSED else r.body for r in rows]
    return pa.RecordBatch.from_pylist([{
        "topic": topic if topic is not None else r.topic, "queueId": qid if qid is not None else r.queue_id,
        "queueOffset": int(q) if qid is not None else r.queue_offset, "physicalOffset": int(p),
        "storeTimestamp": r.store_ts * 1000, "bornTimestamp": r.born_ts * 1000,
        "bornHost": f"{ipaddress.ip_address(r.born_ip)}:{r.born_port}",
        "storeHost": f"{ipaddress.ip_address(r.store_ip)}:{r.store_port}",
        "msgId": r.msg_id, "uniqKey": r.properties.get("UNIQ_KEY"), "tags": r.properties.get("TAGS"),
        "keys": r.properties.get("KEYS"), "properties": list(r.properties.items()), "reconsumeTimes": r.reconsume_times,
        "sysFlag": r.sys_flag, "bodyCRC": r.body_crc, "body": b}
        for r, q, p, b in zip(rows, qoff.tolist(), phys.tolist(), body)],
        schema=pa.schema([ARROW_SCHEMA.field(c) for c in RECORD_COLUMNS]))


def read_at(store_root: str, phys: list[int], *, on_corrupt: str = "fail") -> pa.RecordBatch:
    """The records at CommitLog offsets ``phys`` (found through the IndexFile), each with its own
    topic, queue and queue offset; offsets past the CommitLog's files are left out."""
    log = CommitLog(Store(store_root).commitlog)
    try:
        last = log.files[-1][0] + log.file_size
        p = np.array(sorted(set(x for x in phys if log.files[0][0] <= x < last)), np.int64)
        size = np.array([int(np.frombuffer(log.view(x - x % log.file_size)[x % log.file_size:x % log.file_size + 4]
                                           .tobytes(), ">i4")[0]) for x in p.tolist()], np.int64)
        fits = (size > 0) & (p % log.file_size + size <= log.file_size)
        p, size = p[fits], size[fits]
        buf, at = log.gather(p, size)
        ok = _check(buf, at, size, p, log, on_corrupt)
        p, at = p[ok], at[ok]
        sys_flag = _be(buf, at + message.SYSFLAG_AT, 4, ">i4")
        store_ts = _be(buf, at + message.STORE_TS_AT + np.where(sys_flag & message.BORNHOST_V6, message.HOST_V6_EXTRA, 0), 8, ">i8")
        return _columns(buf, at, p, None, sys_flag, store_ts, None, None)
    finally:
        log.close()


def index_lookup(store_root: str, keys: list[str], topics: list[str], slots: int, entries: int) -> list[int]:
    """CommitLog offsets the IndexFiles hold under ``topic#key`` for every topic and key (hash
    matches: the caller compares the keys)."""
    from rocketbox.store import indexfile
    out: list[int] = []
    for topic in topics:
        for key in keys:
            out += indexfile.find(os.path.join(store_root, "index"), f"{topic}#{key}", slots, entries, 1 << 16)
    return out
