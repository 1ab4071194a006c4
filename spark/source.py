"""The ``rocketbox`` PySpark data source (pyspark 4.x's Python Data Source API): batch reads of a
store's files (``spark/storefiles.py``).

    spark.read.format("rocketbox").option("path", STORE_ROOT).option("topic", "T").load()

Options: ``path`` (a ``storePathRootDir``; the ``brokerName`` column is option ``brokerName``), or
``paths`` for several appliances' stores read as one table (``BROKER=PATH,BROKER=PATH``: batch
reads; the ``brokerName`` column tells them apart); ``topic`` (a name or a comma list) or
``topicPattern`` (a regular expression); ``queues`` (a comma list of queue ids); ``startingOffsets``
and ``endingOffsets`` (``earliest``, ``latest``, or JSON as Spark's Kafka source writes them:
``{"T":{"0":5,"1":-2}}``, -2 earliest, -1 latest); ``startTime`` / ``endTime`` (epoch ms or ISO
8601: the first offset stored at or after it, found by the records' store times);
``maxRecordsPerPartition`` (100,000); ``onCorruptRecord`` (``fail`` or ``skip``); ``flushedOnly``
(``true``: nothing stored after the checkpoint's last flushed time, as always under SYNC_FLUSH).

**Planning** fixes each queue's end (``Store.bounds``: the consume queue's valid entries now) and
splits each queue's range into partitions of at most ``maxRecordsPerPartition``; a partition reads
its consume-queue slice and gathers the CommitLog records through mmap into one Arrow batch.

**Filter pushdown** (pyspark 4.1+, ``spark.sql.python.filterPushdown.enabled``): ``topic`` and
``queueId`` (=, IN) choose the queues; ``storeTimestamp`` (<, <=, >, >=, =) narrows each queue's
offsets by store time; ``tags`` (=, IN) drops consume-queue entries by tag hash before any record is
read.  Spark still applies every filter to the rows, so a query gives the same rows with or
without pushdown.
"""
from __future__ import annotations

import datetime
import json
import os
import re

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from rocketbox.spark import storefiles
from rocketbox.store import indexfile

NAME = "rocketbox"
DEFAULT_PARTITION = 100_000
BATCH_ROWS = 8_192           # rows in one Arrow batch handed to Spark (option batchRows)


def _time_ms(text: str | None) -> int | None:
    """Epoch ms from an option: a whole number, or ISO 8601 (naive: UTC)."""
    if text is None or text == "":
        return None
    if re.fullmatch(r"-?\d+", text.strip()):
        return int(text)
    t = datetime.datetime.fromisoformat(text.strip())
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return int(t.timestamp() * 1000)


def _ms(value) -> int:
    """A pushed-down timestamp value in epoch ms."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return int(value.timestamp() * 1000)
    return int(value)


class QueueSlice(InputPartition):
    """Messages [start, end) of one queue of the store at ``path`` (broker ``broker``); ``tags``:
    the tag strings to keep (None: all)."""

    def __init__(self, topic: str, qid: int, start: int, end: int, flushed_ts: int | None, tags,
                 path: str = "", broker: str = ""):
        super().__init__((broker, topic, qid, start, end))
        self.topic, self.qid, self.start, self.end, self.flushed_ts, self.tags = topic, qid, start, end, flushed_ts, tags
        self.path, self.broker = path, broker


class RecordsAt(InputPartition):
    """Records at these CommitLog offsets of the store at ``path`` (found through the IndexFile)."""

    def __init__(self, phys: list[int], path: str = "", broker: str = ""):
        super().__init__((broker, len(phys)))
        self.phys, self.path, self.broker = phys, path, broker


def stores(options) -> list[tuple[str, str]]:
    """The stores a job reads, as (broker name, store root): option ``paths``, a comma list of
    ``BROKER=PATH`` (several appliances' stores as one table), else ``path`` (and ``brokerName``,
    the column's value, "" when not given)."""
    if options.get("paths"):
        out = []
        for entry in options["paths"].split(","):
            broker, eq, path = entry.strip().partition("=")
            if not eq or not broker or not path:
                raise ValueError(f"option 'paths': expected BROKER=PATH entries separated by commas, got {entry!r}")
            out.append((broker, path))
        return out
    if not options.get("path"):
        raise ValueError("option 'path' is required (a store's storePathRootDir), or 'paths' (BROKER=PATH,...)")
    return [(options.get("brokerName") or "", options["path"])]


def _with_broker(batches, names: tuple[str, ...], broker: str):
    """The record batches with the ``brokerName`` column, when asked, in ``names``' order."""
    for batch in batches:
        if "brokerName" in names:
            batch = batch.append_column(storefiles.ARROW_SCHEMA.field("brokerName"),
                                        pa.array([broker] * batch.num_rows, pa.string())).select(list(names))
        yield batch


def _record_names(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n for n in names if n != "brokerName")


def _indexed(store, keys: set[str], topics: list[str]) -> list[int] | None:
    """CommitLog offsets of the messages of ``topics`` indexed under any of ``keys``, or None when
    the store's IndexFiles cannot answer (none, or a geometry this cannot tell): then the queues
    are scanned instead, so a query's rows never depend on the index."""
    index = os.path.join(store.root, "index")
    files = sorted(f for f in os.listdir(index)) if os.path.isdir(index) else []
    if not files:
        return None
    slots, entries = store.index_geometry()
    if any(os.path.getsize(os.path.join(index, f)) != indexfile.file_size(slots, entries) for f in files):
        return None
    return sorted(set(storefiles.index_lookup(store.root, sorted(keys), topics, slots, entries)))


def _names(schema) -> tuple[str, ...]:
    """The columns a read builds: those of the schema Spark asks for (a user's ``.schema(...)``
    naming fewer columns builds only those); ValueError for a column the source has not."""
    names = tuple(schema.fieldNames()) if schema is not None else tuple(storefiles.ARROW_SCHEMA.names)
    unknown = [n for n in names if n not in storefiles.ARROW_SCHEMA.names]
    if unknown:
        raise ValueError(f"the rocketbox source has no column {', '.join(unknown)}; its columns: {storefiles.SCHEMA}")
    return names


class StoreReader(DataSourceReader):
    """The reader without pushdown (a reader that has ``pushFilters`` fails to plan where
    ``spark.sql.python.filterPushdown.enabled`` is false): ``PushdownReader`` adds it."""

    def __init__(self, options: dict, schema=None):
        self.options = options                   # Spark's: names case-insensitive
        self.names = _names(schema)
        self.stores = stores(options)
        self.topics_eq: set[str] | None = None
        self.queues_eq: set[int] | None = None
        self.tags_eq: set[str] | None = None
        self.ts_lo: int | None = None            # storeTimestamp >= ts_lo
        self.ts_hi: int | None = None            # storeTimestamp < ts_hi
        self.keys_eq: set[str] | None = None     # uniqKey or one of keys: found through the IndexFile

    def _push(self, f) -> bool:
        """Narrow the plan by ``f`` -> False: Spark keeps it as well (every filter is applied to
        the rows again by Spark; pushing it only reads less)."""
        col = f.attribute[0] if len(f.attribute) == 1 else None
        values = {f.value} if isinstance(f, EqualTo) else set(f.value) if isinstance(f, In) else None
        if col == "topic" and values is not None:
            self.topics_eq = values if self.topics_eq is None else self.topics_eq & values
        elif col == "queueId" and values is not None:
            self.queues_eq = {int(v) for v in values} if self.queues_eq is None else self.queues_eq & {int(v) for v in values}
        elif col == "tags" and values is not None:
            self.tags_eq = values if self.tags_eq is None else self.tags_eq & values
        elif col in ("uniqKey", "keys") and values is not None:
            found = {str(v).split(" ")[0] for v in values}          # (keys: the string's first key is indexed too)
            self.keys_eq = found if self.keys_eq is None else self.keys_eq | found
        elif col == "storeTimestamp" and isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
            ms = _ms(f.value)
            lo = ms + 1 if isinstance(f, GreaterThan) else ms if isinstance(f, (GreaterThanOrEqual, EqualTo)) else None
            hi = ms if isinstance(f, LessThan) else ms + 1 if isinstance(f, (LessThanOrEqual, EqualTo)) else None
            if lo is not None:
                self.ts_lo = lo if self.ts_lo is None else max(self.ts_lo, lo)
            if hi is not None:
                self.ts_hi = hi if self.ts_hi is None else min(self.ts_hi, hi)
        else:
            return False
        return False

    # ------------------------------------------------------------ planning
    def partitions(self):
        out = [p for broker, path in self.stores for p in self._partitions(path, broker)]
        return out or [QueueSlice("", -1, 0, 0, None, None)]

    def _partitions(self, path: str, broker: str) -> list:
        o = self.options
        store = storefiles.Store(path)
        topics = store.matching(o.get("topic"), o.get("topicPattern"))
        if self.topics_eq is not None:
            topics = [t for t in topics if t in self.topics_eq]
        wanted = {int(q) for q in o["queues"].split(",")} if o.get("queues") else None
        if self.queues_eq is not None:
            wanted = self.queues_eq if wanted is None else wanted & self.queues_eq
        starting, ending = _offsets(o.get("startingOffsets"), "earliest"), _offsets(o.get("endingOffsets"), "latest")
        t_lo = max([t for t in (_time_ms(o.get("startTime")), self.ts_lo) if t is not None], default=None)
        t_hi = min([t for t in (_time_ms(o.get("endTime")), self.ts_hi) if t is not None], default=None)
        per = int(o.get("maxRecordsPerPartition") or DEFAULT_PARTITION)
        if per <= 0:
            raise ValueError(f"maxRecordsPerPartition must be positive, got {per}")
        flushed = _flushed_bound(store, o)
        if self.keys_eq is not None:
            phys = _indexed(store, self.keys_eq, topics)
            if phys is not None:
                return [RecordsAt(phys[i:i + per], path, broker) for i in range(0, len(phys), per)]
        out = []
        for topic in topics:
            for qid in store.queues(topic):
                if wanted is not None and qid not in wanted:
                    continue
                lo, hi = store.bounds(topic, qid)
                start = _pick(starting, topic, qid, lo, hi, "startingOffsets")
                end = _pick(ending, topic, qid, lo, hi, "endingOffsets")
                if flushed is not None:
                    end = min(end, store.offset_at_time(topic, qid, flushed + 1, start, end))
                if t_lo is not None:
                    start = max(start, store.offset_at_time(topic, qid, t_lo, start, end))
                if t_hi is not None:
                    end = min(end, store.offset_at_time(topic, qid, t_hi, start, end))
                out += _splits(topic, qid, start, end, per, flushed, self.tags_eq, path, broker)
        return out

    def read(self, partition):
        if isinstance(partition, RecordsAt):
            batch = storefiles.read_at(partition.path, partition.phys, on_corrupt=self.options.get("onCorruptRecord", "fail"))
            if batch.num_rows:
                yield from _with_broker([batch.select(list(_record_names(self.names)))], self.names, partition.broker)
            return
        if partition.qid < 0:
            return
        yield from _with_broker(storefiles.read_batches(
            partition.path, partition.topic, partition.qid, partition.start, partition.end,
            flushed_ts=partition.flushed_ts, tags=partition.tags, names=_record_names(self.names),
            on_corrupt=self.options.get("onCorruptRecord", "fail"), chunk=int(self.options.get("batchRows") or BATCH_ROWS)),
            self.names, partition.broker)


def _flushed_bound(store, options) -> int | None:
    """The checkpoint's last flushed store time, when the job reads only flushed messages: asked
    (``flushedOnly``), or the appliance runs with SYNC_FLUSH."""
    if (options.get("flushedOnly") or "").lower() == "true" or store.sync_flush():
        return store.flushed_ts() or 0
    return None


def _splits(topic: str, qid: int, start: int, end: int, per: int, flushed, tags, path: str = "",
            broker: str = "") -> list[QueueSlice]:
    return [QueueSlice(topic, qid, s, min(s + per, end), flushed, tags, path, broker) for s in range(start, end, per)]


class StreamReader(DataSourceStreamReader):
    """``readStream``: the offset is ``{topic: {queueId: next offset}}`` (``startingOffsets``'
    JSON); ``latestOffset`` is each matching queue's readable end now (new queues and topics a
    pattern matches join at their start), at most ``maxRecordsPerTrigger`` past the last offset
    this reader handed out (pyspark 4.1 does not tell a source where a restarted query starts,
    so the first batch after a restart is not capped).  A micro-batch reads [start, end) of each queue, so a query restarted
    from its checkpoint neither skips nor repeats a message (while retention has not deleted it)."""

    def __init__(self, options, schema=None):
        self.options = options
        self.names = _names(schema)
        (self.broker, self.path), *more = stores(options)
        if more:
            raise ValueError("a stream reads one store: option 'path', not 'paths'")
        self.last: dict | None = None

    def _ends(self) -> dict:
        store = storefiles.Store(self.path)
        o = self.options
        wanted = {int(q) for q in o["queues"].split(",")} if o.get("queues") else None
        flushed = _flushed_bound(store, o)
        out: dict = {}
        for topic in store.matching(o.get("topic"), o.get("topicPattern")):
            for qid in store.queues(topic):
                if wanted is None or qid in wanted:
                    lo, hi = store.bounds(topic, qid)
                    if flushed is not None:
                        hi = store.offset_at_time(topic, qid, flushed + 1, lo, hi)
                    out.setdefault(topic, {})[str(qid)] = [lo, hi]
        return out

    def initialOffset(self) -> dict:
        spec = _offsets(self.options.get("startingOffsets"), "latest")
        out: dict[str, dict[str, int]] = {}
        for topic, queues in self._ends().items():
            for q, (lo, hi) in queues.items():
                out.setdefault(topic, {})[q] = _pick(spec, topic, int(q), lo, hi, "startingOffsets")
        self._handed(out)
        return out

    def _handed(self, offsets: dict) -> None:
        """Remember the furthest offset of each queue handed to Spark (the cap's base; Spark may
        ask for the latest before the initial offset)."""
        last = self.last if self.last is not None else {}
        for topic, queues in offsets.items():
            for q, v in queues.items():
                mine = last.setdefault(topic, {})
                mine[q] = max(mine.get(q, v), v)
        self.last = last

    def latestOffset(self) -> dict:
        ends = self._ends()
        # capped only past an offset this reader handed out: a query restarted from its checkpoint
        # starts where the checkpoint says, which this reader does not know, so its first batch
        # takes all there is (a cap from the queue's start could end below where it starts)
        cap = int(self.options.get("maxRecordsPerTrigger") or 0) if self.last is not None else 0
        out: dict = {}
        budget = cap
        for topic, queues in sorted(ends.items()):
            for q, (lo, hi) in sorted(queues.items(), key=lambda kv: int(kv[0])):
                prev = max((self.last or {}).get(topic, {}).get(q, lo), lo)
                end = hi
                if cap:
                    end = min(hi, prev + max(budget, 0))
                    budget -= end - prev
                out.setdefault(topic, {})[q] = max(end, prev)
        self._handed(out)
        return out

    def partitions(self, start: dict, end: dict):
        per = int(self.options.get("maxRecordsPerPartition") or DEFAULT_PARTITION)
        store = storefiles.Store(self.path)
        out = []
        for topic, queues in end.items():
            for q, e in queues.items():
                s = start.get(topic, {}).get(q)
                if s is None:
                    s = store.bounds(topic, int(q))[0]          # a queue that appeared meanwhile: from its start
                out += _splits(topic, int(q), int(s), int(e), per, None, None)
        return out

    def read(self, partition: InputPartition):
        assert isinstance(partition, QueueSlice)        # (what this reader's partitions() planned)
        yield from _with_broker(storefiles.read_batches(
            self.path, partition.topic, partition.qid, partition.start, partition.end, names=_record_names(self.names),
            on_corrupt=self.options.get("onCorruptRecord", "fail")), self.names, self.broker)

    def commit(self, end: dict) -> None:
        pass


class PushdownReader(StoreReader):
    def pushFilters(self, filters):
        for f in filters:
            if not self._push(f):
                yield f


def _offsets(text: str | None, default: str):
    """``earliest`` / ``latest`` / the Kafka-style JSON -> "earliest", "latest" or a dict."""
    text = (text or default).strip()
    if text in ("earliest", "latest"):
        return text
    try:
        table = json.loads(text)
    except ValueError:
        raise ValueError(f"offsets must be earliest, latest or JSON like {{\"T\":{{\"0\":5}}}}, got {text!r}") from None
    return {t: {int(q): int(v) for q, v in qs.items()} for t, qs in table.items()}


def _pick(spec, topic: str, qid: int, lo: int, hi: int, name: str) -> int:
    if spec == "earliest":
        return lo
    if spec == "latest":
        return hi
    v = spec.get(topic, {}).get(qid, -2 if name == "startingOffsets" else -1)
    if v == -2:
        return lo
    if v == -1:
        return hi
    if not lo <= v <= hi:
        raise ValueError(f"{name}: offset {v} of {topic} queue {qid} is out of range [{lo}, {hi}]")
    return v


class RocketboxSource(DataSource):
    """``pushdown``: whether the session lets Python data sources take filters (``register``
    sets it from ``spark.sql.python.filterPushdown.enabled``); option ``pushdown=false`` turns it
    off for one read."""
    pushdown = False

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self):
        return storefiles.SCHEMA

    def reader(self, schema):
        on = self.pushdown and self.options.get("pushdown", "true").lower() != "false"
        return (PushdownReader if on else StoreReader)(self.options, schema)

    def streamReader(self, schema):
        return StreamReader(self.options, schema)

    def writer(self, schema, overwrite: bool):
        from rocketbox.spark.sink import TopicWriter
        return TopicWriter(self.options, schema)

    def streamWriter(self, schema, overwrite: bool):
        from rocketbox.spark.sink import TopicStreamWriter
        return TopicStreamWriter(self.options, schema)
