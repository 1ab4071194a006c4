"""Topic configuration: ``config/topics.json`` and the shared topic table.  The writer is the one
process that writes both (boot loads them before any role starts).

topics.json is persisted before the shared table shows a change, so the file is never behind what
producers can see.  Built-in topics follow RocketMQ's TopicConfigManager (FACTS §5.6).
"""
from __future__ import annotations

import os
import time

from shm.layout import C, NAME_BYTES, T
from shm.tables import TableFull
from store import configfile
from store.consumequeue import queue_dir

PERM_INHERIT, PERM_WRITE, PERM_READ = 1, 2, 4
PERM_RW = PERM_READ | PERM_WRITE


def topic_config(name: str, read: int, write: int, perm: int = PERM_RW, sys_flag: int = 0,
                 order: bool = False, filter_type: str = "SINGLE_TAG") -> dict:
    return {"order": order, "perm": perm, "readQueueNums": read, "topicFilterType": filter_type,
            "topicName": name, "topicSysFlag": sys_flag, "writeQueueNums": write}


class QueueNumsOutOfRange(ValueError):
    """A topic with more read or write queues than ``maxTopicQueueNums`` (or fewer than 0)."""


def check_queue_nums(tc: dict, most: int) -> None:
    """Refuse (QueueNumsOutOfRange) a topic whose read or write queue count is outside 0 to ``most``
    (``maxTopicQueueNums``): each of its queues is a consume-queue directory made with the topic,
    and an entry in every client's route."""
    for key in ("readQueueNums", "writeQueueNums"):
        n = int(tc.get(key, 16))
        if not 0 <= n <= most:
            raise QueueNumsOutOfRange(f"{key} {n} of topic {tc.get('topicName')} is out of range: "
                                      f"a topic has 0 to {most} queues (maxTopicQueueNums)")


def queue_nums(tc: dict) -> int:
    return max(int(tc.get("readQueueNums", 0)), int(tc.get("writeQueueNums", 0)))


def builtin_topics(cfg) -> list[dict]:
    out = [topic_config("SELF_TEST_TOPIC", 1, 1)]
    if cfg.autoCreateTopicEnable:
        out.append(topic_config("TBW102", cfg.defaultTopicQueueNums, cfg.defaultTopicQueueNums, 7))
    out += [topic_config("BenchmarkTest", 1024, 1024),
            topic_config(cfg.brokerClusterName, 16, 16, 7 if cfg.clusterTopicEnable else PERM_INHERIT)]
    if cfg.brokerTopicEnable:
        out.append(topic_config(cfg.brokerName, 1, 1, 7))
    out += [topic_config("OFFSET_MOVED_EVENT", 1, 1),
            topic_config("SCHEDULE_TOPIC_XXXX", 18, 18),
            topic_config(f"{cfg.brokerClusterName}_REPLY_TOPIC", 1, 1)]
    return out


class TopicTable:
    """Write side of the shared topic table plus the full TopicConfig dicts behind it."""

    def __init__(self, cfg, views: dict, control):
        self.path = os.path.join(cfg.config_dir, "topics.json")
        self.cfg, self.names, self.meta, self.control = cfg, views["topic_names"], views["topic_meta"], control
        self.configs: dict[str, dict] = {}
        self.laid = configfile.Members("topicConfigTable", {})     # the configs as topics.json lays them out
        self.index: dict[str, int] = {}
        self.data_version = {"counter": 0, "timestamp": int(time.time() * 1000)}

    def load(self) -> None:
        """Boot: read topics.json (creating it with the built-in topics) into the shared table."""
        data = configfile.read(self.path)
        if data is None:
            data = {"topicConfigTable": {t["topicName"]: t for t in builtin_topics(self.cfg)}}
            self._set_configs(data["topicConfigTable"])
            self.persist()
        else:
            self._set_configs(data.get("topicConfigTable", {}))
            self._set_data_version(data.get("dataVersion", self.data_version))
        for name, tc in self.configs.items():
            try:
                check_queue_nums(tc, self.cfg.maxTopicQueueNums)
            except QueueNumsOutOfRange as e:
                raise QueueNumsOutOfRange(f"{self.path}: {e}") from None
            self._publish(name, tc)

    def attach(self) -> None:
        """A restarted writer: the shared table is already filled; re-read the full configs."""
        data = configfile.read(self.path) or {}
        self._set_configs(data.get("topicConfigTable", {}))
        self._set_data_version(data.get("dataVersion", self.data_version))
        for i in range(int(self.control[C.TOPIC_COUNT])):
            self.index[self.names[i].decode()] = i

    def upsert(self, tc: dict) -> int:
        """Create or update a topic: checked, persisted, then published to the shared table."""
        name = tc["topicName"]
        check_queue_nums(tc, self.cfg.maxTopicQueueNums)
        if name not in self.index and int(self.control[C.TOPIC_COUNT]) >= len(self.names):
            raise TableFull(f"shared topic table is full ({len(self.names)} topics, see shmTopicSlots)")
        self.configs[name] = tc
        self.laid.put(name, tc)
        self.persist({"counter": self.data_version.get("counter", 0) + 1, "timestamp": int(time.time() * 1000)})
        self._ensure_dirs(name, tc)
        return self._publish(name, tc)

    def ensure_queue_dirs(self) -> None:
        for name, tc in self.configs.items():
            self._ensure_dirs(name, tc)

    def _ensure_dirs(self, name: str, tc: dict) -> None:
        """An empty consume-queue directory per queue: recovery reads a missing one as deleted."""
        for q in range(queue_nums(tc)):
            os.makedirs(queue_dir(self.cfg.root, name, q), exist_ok=True)

    def persist(self, data_version: dict | None = None) -> None:
        """Write topics.json (under a new ``data_version`` when given), then show its version."""
        version = data_version or self.data_version
        configfile.write_bytes(self.path, self.laid.file({"dataVersion": version}))
        self._set_data_version(version)

    def _set_configs(self, configs: dict) -> None:
        self.configs = dict(configs)
        self.laid = configfile.Members("topicConfigTable", self.configs)

    def _set_data_version(self, version: dict) -> None:
        """topics.json's dataVersion, kept here and in the control block, where a registration of
        changed topics reads it (a name server takes a broker's topics only under a new one)."""
        self.data_version = version
        self.control[C.TOPICS_DATA_VERSION_TS] = int(version.get("timestamp", 0))
        self.control[C.TOPICS_DATA_VERSION] = int(version.get("counter", 0))

    def _publish(self, name: str, tc: dict) -> int:
        raw = name.encode()
        if len(raw) >= NAME_BYTES:
            raise ValueError(f"topic name too long for the shared table: {name!r}")
        i = self.index.get(name)
        new = i is None
        if new:
            i = int(self.control[C.TOPIC_COUNT])
            if i >= len(self.names):
                raise TableFull(f"shared topic table is full ({len(self.names)} topics, see shmTopicSlots)")
            self.names[i] = raw
        row = self.meta[i]
        row[T.READ_QUEUE_NUMS] = int(tc.get("readQueueNums", 16))
        row[T.WRITE_QUEUE_NUMS] = int(tc.get("writeQueueNums", 16))
        row[T.PERM] = int(tc.get("perm", PERM_RW))
        row[T.TOPIC_SYS_FLAG] = int(tc.get("topicSysFlag", 0))
        row[T.ORDER] = int(bool(tc.get("order", False)))
        row[T.LIVE] = 1
        if new:
            self.index[name] = i
            self.control[C.TOPIC_COUNT] = i + 1
        self.control[C.TOPIC_VERSION] += 1
        return i
