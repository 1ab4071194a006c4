"""Read-side caches of the shared topic and queue tables (written by the writer only).

Entries are append-only and filled in before the count is raised, so a cache only has to look at
entries past the count it saw last; a topic's meta row may change in place (topic_version bumps).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rocketbox.shm.layout import C, T


class TopicIndex:
    def __init__(self, views: dict, control: np.ndarray):
        self.names, self.meta, self.control = views["topic_names"], views["topic_meta"], control
        self.by_name: dict[str, int] = {}
        self.seen = 0
        self.rows: dict[int, list[int]] = {}     # meta rows as Python ints, as of ``version``
        self.version = -1

    def refresh(self) -> None:
        n = int(self.control[C.TOPIC_COUNT])
        for i in range(self.seen, n):
            self.by_name[self.names[i].decode()] = i
        self.seen = n

    def lookup(self, topic: str) -> int | None:
        """Index of a live topic, or None."""
        return self.live(topic)[0]

    def live(self, topic: str) -> tuple[int, list[int]] | tuple[None, None]:
        """(index, meta row) of a live topic, or (None, None)."""
        i = self.by_name.get(topic)
        if i is None:
            self.refresh()
            i = self.by_name.get(topic)
        if i is None:
            return None, None
        row = self.row(i)
        return (i, row) if row is not None and row[T.LIVE] else (None, None)

    def row(self, idx: int) -> list[int]:
        """Topic ``idx``'s meta row (index it with ``T``), read from shared memory again only
        after the writer changed a topic (it bumps TOPIC_VERSION after writing the row)."""
        version = int(self.control[C.TOPIC_VERSION])
        if version != self.version:
            self.rows.clear()
            self.version = version
        row = self.rows.get(idx)
        if row is None:
            row = self.rows[idx] = self.meta[idx].tolist()
        return row

    def queue_nums(self, idx: int) -> int:
        return queue_nums_of(self.row(idx))


class TopicChanges:
    """The topic table's rows that changed since the last look (``take``): what a registration
    after a change tells the name servers, found with one vector compare of the meta rows."""

    def __init__(self, views: dict, control: np.ndarray):
        self.names, self.meta, self.control = views["topic_names"], views["topic_meta"], control
        self.seen = self.meta[:0].copy()

    def mark(self) -> None:
        """Everything is seen as it is now (a registration of the whole table is under way)."""
        self.take()

    def take(self) -> list[tuple[str, list[int]]]:
        """(name, meta row) of each live topic made or changed since the last look."""
        n = int(self.control[C.TOPIC_COUNT])          # rows below the count are filled in
        rows, old = self.meta[:n].copy(), len(self.seen)
        changed = np.flatnonzero((rows[:old] != self.seen).any(axis=1)).tolist() + list(range(old, n))
        self.seen = rows
        return [(self.names[i].decode(), rows[i].tolist()) for i in changed if rows[i][T.LIVE]]


@dataclass(frozen=True)
class TableUse:
    """How full one shared table is, the broker.conf key that sizes it, and its bytes in shared memory."""
    name: str
    used: int
    capacity: int
    key: str
    nbytes: int

    @property
    def near_full(self) -> bool:
        return self.used >= 0.9 * self.capacity

    def warning(self) -> str:
        """What ``appliance status`` and the ready line say of a table near full."""
        return f"table {self.name} NEAR FULL: {self.used} of {self.capacity} (raise {self.key})"


def table_use(views: dict, control: np.ndarray) -> list[TableUse]:
    """Every sized table of the state segment: topics, queues, consumer offsets, and the consumer
    group members of the fullest reader (each reader has rows of its own)."""
    clients = views["clients"]
    members = int((clients["heartbeat_ms"] != 0).sum(axis=1).max()) if clients.size else 0
    return [
        TableUse("topics", int(control[C.TOPIC_COUNT]), len(views["topic_names"]), "shmTopicSlots",
                 views["topic_names"].nbytes + views["topic_meta"].nbytes),
        TableUse("queues", int(control[C.QUEUE_COUNT]), len(views["queue_ids"]), "shmQueueSlots",
                 sum(views[n].nbytes for n in ("queue_max", "queue_min", "queue_names", "queue_ids"))),
        TableUse("consumer offsets", int(control[C.OFFSET_COUNT]), len(views["offset_qids"]), "shmOffsetSlots",
                 sum(views[n].nbytes for n in ("offset_values", "offset_pulls", "offset_keys", "offset_qids"))),
        TableUse("group members (fullest reader)", members, clients.shape[1], "shmClientRows", clients.nbytes),
    ]


class TableFull(RuntimeError):
    """A shared table with no slot left for a new entry; the message names the key that sizes it."""


def queue_nums_of(row) -> int:
    """How many queues a topic's meta row gives it: the larger of its read and write counts."""
    return max(row[T.READ_QUEUE_NUMS], row[T.WRITE_QUEUE_NUMS])


def append_queue(views: dict, control: np.ndarray, topic: bytes, queue_id: int) -> int:
    """Add a queue slot; returns it.  Called only by the queue table's one writer: the writer, or
    boot recovery before any role runs.  The entry is filled in before the count is raised."""
    s = int(control[C.QUEUE_COUNT])
    if s >= len(views["queue_ids"]):
        raise TableFull(f"shared queue table is full ({s} queues, see shmQueueSlots)")
    views["queue_names"][s] = topic
    views["queue_ids"][s] = queue_id
    control[C.QUEUE_COUNT] = s + 1
    return s


class QueueIndex:
    def __init__(self, views: dict, control: np.ndarray):
        self.names, self.ids, self.control = views["queue_names"], views["queue_ids"], control
        self.max_offsets, self.min_offsets = views["queue_max"], views["queue_min"]
        self.by_key: dict[tuple[str, int], int] = {}
        self.seen = 0

    def refresh(self) -> None:
        n = int(self.control[C.QUEUE_COUNT])
        for i in range(self.seen, n):
            self.by_key[(self.names[i].decode(), int(self.ids[i]))] = i
        self.seen = n

    def slot(self, topic: str, queue_id: int) -> int | None:
        s = self.by_key.get((topic, queue_id))
        if s is None:
            self.refresh()
            s = self.by_key.get((topic, queue_id))
        return s


def offset_table(keys: list[str], qids: np.ndarray, values: np.ndarray) -> dict:
    """The committed offsets of the slots whose keys are ``keys`` ("topic@group", decoded), as
    consumerOffset.json and GET_ALL_CONSUMER_OFFSET hold them: {key: {queue id (str): offset}}."""
    out: dict[str, dict] = {}
    for key, qid, offset in zip(keys, qids.tolist(), values.tolist()):
        out.setdefault(key, {})[str(qid)] = offset
    return out


class OffsetIndex:
    """Committed consumer offsets (shared table written by the writer, writer/groups.py)."""

    def __init__(self, views: dict, control: np.ndarray):
        self.keys, self.qids, self.values, self.control = (views["offset_keys"], views["offset_qids"],
                                                           views["offset_values"], control)
        self.by_key: dict[tuple[bytes, int], int] = {}
        self.seen = 0

    def get(self, key: bytes, queue_id: int) -> int | None:
        s = self.slot(key, queue_id)
        return None if s is None else int(self.values[s])

    def slot(self, key: bytes, queue_id: int) -> int | None:
        """The table slot of the offset of ``key`` (topic@group) on a queue; None before any."""
        s = self.by_key.get((key, queue_id))
        if s is None:
            self._catch_up()
            s = self.by_key.get((key, queue_id))
        return s

    def table(self) -> dict:
        """Every committed offset: {"topic@group": {queue id (str): offset}}."""
        n = int(self.control[C.OFFSET_COUNT])
        return offset_table([key.decode() for key in self.keys[:n].tolist()], self.qids[:n], self.values[:n])

    def _catch_up(self) -> None:
        """Index the slots the writer took since the last look (slots are never given back)."""
        n = int(self.control[C.OFFSET_COUNT])
        for i in range(self.seen, n):
            self.by_key[(bytes(self.keys[i]), int(self.qids[i]))] = i
        self.seen = n

    def topics_of(self, group: str) -> set[str]:
        """The topics ``group`` has committed offsets on (ConsumerOffsetManager.whichTopicByConsumer;
        a key is ``topic@group``, and a topic has no ``@``)."""
        self._catch_up()
        suffix = b"@" + group.encode()
        return {key[:-len(suffix)].decode() for key, _qid in self.by_key if key.endswith(suffix)
                and b"@" not in key[:-len(suffix)]}

    def groups_of(self, topic: str) -> set[str]:
        """The groups with committed offsets on ``topic`` (ConsumerOffsetManager.whichGroupByTopic)."""
        self._catch_up()
        prefix = topic.encode() + b"@"
        return {key[len(prefix):].decode() for key, _qid in self.by_key if key.startswith(prefix)}

    def has_room(self, key: bytes, queue_id: int) -> bool:
        """The table holds this offset, or a free slot for it (slots are never given back)."""
        return int(self.control[C.OFFSET_COUNT]) < len(self.keys) or self.get(key, queue_id) is not None
