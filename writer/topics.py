"""Topic configuration: ``config/topics.json`` and the shared topic table.  The writer is the one
process that writes both (boot loads them before any role starts).

topics.json is persisted before the shared table shows a change, so the file is never behind what
producers can see; the writer's loop does not wait for it (``TopicTable.request``).  Built-in
topics follow RocketMQ's TopicConfigManager (FACTS §5.6).
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import NamedTuple

from rocketbox.shm.layout import NAME_BYTES, C, T
from rocketbox.shm.tables import TableFull
from rocketbox.store import configfile, topicjournal
from rocketbox.store.consumequeue import queue_dir
from rocketbox.store.delay import SCHEDULE_TOPIC
from rocketbox.store.timer import TIMER_TOPIC
from rocketbox.store.topicconfig import (  # noqa: F401  (the records live in store/; the writer's names for them)
    ATTRIBUTES,
    PERM_INHERIT,
    PERM_READ,
    PERM_RW,
    PERM_WRITE,
    QueueNumsOutOfRange,
    builtin_topics,
    check_queue_nums,
    queue_nums,
    topic_config,
)
from rocketbox.store.transaction import CHECK_MAX_TOPIC, HALF_TOPIC, OP_TOPIC
from rocketbox.writer.filethread import FileThread

log = logging.getLogger("rocketbox.writer")
SYSTEM_QUEUES_TOPICS = (SCHEDULE_TOPIC, TIMER_TOPIC, HALF_TOPIC, OP_TOPIC, CHECK_MAX_TOPIC)   # the roles' own topics, added to an
                                                                             # older store's table (when built in)
REWRITE_AFTER_S = 1.0       # topics.json is rewritten whole this long after the last change (store/topicjournal.py)


class _Change(NamedTuple):
    """A topic's creation or update on its way to topics.json; ``token`` is the requester's.  A
    change without a name is the request to rewrite topics.json whole (``REWRITE``)."""
    name: str | None
    tc: dict | None
    version: dict           # topics.json's dataVersion once this change is in it
    token: object


class TopicTable:
    """Write side of the shared topic table plus the full TopicConfig dicts behind it.

    In the writer's loop a change is ``request``ed: checked, laid out into the configs at once, and
    made durable by a thread (``writer.filethread``): a line in topics.json's journal, and now and
    then topics.json rewritten whole (``store/topicjournal.py``); ``settle`` then publishes each
    change whose write is done, so the files are never behind what producers see, and reports it."""

    def __init__(self, cfg, views: dict, control, waker=None):
        self.path = os.path.join(cfg.config_dir, "topics.json")
        self.cfg, self.names, self.meta, self.control = cfg, views["topic_names"], views["topic_meta"], control
        self.configs: dict[str, dict] = {}          # every topic as requested (what the next write lays out)
        self.durable: dict[str, dict] = {}          # every topic as topics.json has it (what a failed write restores)
        self.laid = configfile.Members("topicConfigTable", {})     # the configs as topics.json lays them out
        self.index: dict[str, int] = {}
        self.data_version = {"counter": 0, "timestamp": int(time.time() * 1000)}   # the latest requested
        self.making: set[str] = set()               # new topics requested, not published yet
        self.waker = waker
        self.file: FileThread | None = None         # started by the first request
        self.unclaimed: list[tuple] = []            # settled by ``upsert`` for ``settle``'s caller
        self.journal = topicjournal.Journal(cfg.config_dir)   # the file thread's
        self.changed_at = 0.0                       # monotonic time of the last change requested
        self.rewriting = False                      # a REWRITE submitted, not settled yet

    def load(self) -> None:
        """Boot: read topics.json and its journal (creating the file with the built-in topics) into
        the shared table; a journal that holds changes is folded into the file."""
        data = topicjournal.read(self.cfg.config_dir)
        if data is None:
            data = {"topicConfigTable": {t["topicName"]: t for t in builtin_topics(self.cfg)}}
            self._set_configs(data["topicConfigTable"], self.data_version)
            configfile.write_bytes(self.path, self.laid.file({"dataVersion": self.data_version}))
        else:
            table = data.get("topicConfigTable", {})
            for tc in builtin_topics(self.cfg):             # a store from before a system topic existed
                if tc["topicName"] in SYSTEM_QUEUES_TOPICS and tc["topicName"] not in table:
                    table[tc["topicName"]] = tc
            self._set_configs(table, data.get("dataVersion", self.data_version))
            self._fold_journal()
        for name, tc in self.configs.items():
            try:
                check_queue_nums(tc, self.cfg.maxTopicQueueNums)
            except QueueNumsOutOfRange as e:
                raise QueueNumsOutOfRange(f"{self.path}: {e}") from None
            self._publish(name, tc)

    def attach(self) -> None:
        """A restarted writer: the shared table is already filled; re-read the full configs."""
        data = topicjournal.read(self.cfg.config_dir) or {}
        self._set_configs(data.get("topicConfigTable", {}), data.get("dataVersion", self.data_version))
        self._fold_journal()             # (a line the last writer was cut short in must not run into a new one)
        for i in range(int(self.control[C.TOPIC_COUNT])):
            self.index[self.names[i].decode()] = i

    def _fold_journal(self) -> None:
        """The journal's changes (already in the configs) into topics.json, and the journal emptied."""
        if not self.journal.empty:
            configfile.write_bytes(self.path, self.laid.file({"dataVersion": self.data_version}))
            self.journal.clear()

    def request(self, tc: dict, token=None) -> None:
        """Create or update a topic: checked here (QueueNumsOutOfRange, TableFull, ValueError), then
        handed to the file thread; ``settle`` reports it, with ``token``, once it is durable (a
        journal line, or topics.json whole)."""
        name = tc["topicName"]
        check_queue_nums(tc, self.cfg.maxTopicQueueNums)
        _shared_name(name)
        new = name not in self.index and name not in self.making
        if new and int(self.control[C.TOPIC_COUNT]) + len(self.making) >= len(self.names):
            raise TableFull(f"shared topic table is full ({len(self.names)} topics, see shmTopicSlots)")
        file = self.file
        if file is None:
            file = self.file = FileThread("topics.json", self._lay_out, self._store, self.waker)
        before = self.configs.get(name) or {}
        tc = {**{k: before[k] for k in ATTRIBUTES if k in before}, **tc}     # kept unless named
        if "purgedQueues" in before and "purgedQueues" in tc:
            tc["purgedQueues"] = {**before["purgedQueues"], **tc["purgedQueues"]}
        with file.lock:
            self.configs[name] = tc
            self.laid.put(name, tc)
            self.data_version = {"counter": self.data_version.get("counter", 0) + 1,
                                 "timestamp": int(time.time() * 1000)}
            if new:
                self.making.add(name)
            file.submit(_Change(name, tc, self.data_version, token))
        self.changed_at = time.monotonic()

    def persist(self) -> None:
        """In the writer's loop: topics.json rewritten whole once changes stop coming for
        ``REWRITE_AFTER_S`` (what the journal holds meanwhile is durable already)."""
        if (self.journal.held and not self.rewriting and self.file is not None
                and time.monotonic() - self.changed_at >= REWRITE_AFTER_S):
            self.rewriting = True
            self.file.submit(_Change(None, None, self.data_version, None))

    def settle(self) -> list[tuple]:
        """Publish each change topics.json now has: ``(token, topic index, None)`` each, or
        ``(token, None, error)`` for a change refused (its write failed: undone here; the table was
        full by the time it was published).  In the writer's loop."""
        out, self.unclaimed = self.unclaimed, []
        finished = self.file.done() if self.file is not None else []
        for changes, error in finished:
            if error is None:
                self._show_data_version(changes[-1].version)
            else:
                log.error("cannot write %s: %s; %d topic change(s) refused", self.path, error, len(changes))
                self._undo(changes)
            for ch in changes:
                if ch.name is None:                     # a REWRITE (failed: the next one tries again)
                    self.rewriting = False
                    continue
                self.making.discard(ch.name)
                if error is not None:
                    out.append((ch.token, None, error))
                    continue
                self.durable[ch.name] = ch.tc
                try:
                    out.append((ch.token, self._publish(ch.name, ch.tc), None))
                except TableFull as e:
                    out.append((ch.token, None, e))
        return out

    def upsert(self, tc: dict) -> int:
        """``request`` and ``settle`` in one, waiting for the write (tools and tests): the topic's
        index, or the error that refused it."""
        self.request(tc)
        assert self.file is not None            # (request started it)
        self.file.wait_idle()
        got = None
        for token, idx, error in self.settle():
            if token is not None:
                self.unclaimed.append((token, idx, error))
            elif error is not None:
                raise error
            else:
                got = idx
        assert got is not None                  # (its change is among those settled)
        return got

    def close(self) -> None:
        """The loop's stop: the file thread writes what is pending, topics.json whole, and ends
        (``settle`` after); a second close does nothing."""
        if self.file is not None and not self.file.closing:
            self.file.submit(_Change(None, None, self.data_version, None))
            self.file.close()

    def _lay_out(self, changes: list[_Change]) -> bytes | list[bytes]:   # the file thread's, under the lock
        """topics.json whole (bytes), for a REWRITE or a journal that would pass JOURNAL_MAX; else
        the changes' journal lines (a list)."""
        named = [ch for ch in changes if ch.name is not None]
        if len(named) < len(changes) or self.journal.held + len(named) > topicjournal.JOURNAL_MAX:
            return self.laid.file({"dataVersion": changes[-1].version})
        return [topicjournal.line(ch.version, ch.tc) for ch in named if ch.tc is not None]   # (named: with a tc)

    def _store(self, laid: bytes | list[bytes], changes: list[_Change]) -> None:   # the file thread's
        """The topic directories first, so the files never name a topic whose directory
        recovery would find missing (and read as deleted); then the journal's lines, or topics.json
        whole and the journal emptied.  If a step fails, the directories made for it are removed
        again (empty ones hold nothing, but an undone topic leaves none)."""
        made: list[str] = []
        try:
            for ch in changes:
                if ch.name is not None and ch.tc is not None:       # (a named change has its tc)
                    self._ensure_dirs(ch.name, ch.tc, made)
            if isinstance(laid, bytes):
                configfile.write_bytes(self.path, laid)
                self.journal.clear()
            else:
                self.journal.append(laid)
        except OSError:
            for d in reversed(made):
                with contextlib.suppress(OSError):
                    os.rmdir(d)
            raise

    def _undo(self, changes: list[_Change]) -> None:
        """A failed write's changes out of the configs again, unless a later change replaced one."""
        assert self.file is not None            # (settle's: what the file thread did)
        with self.file.lock:
            for ch in reversed(changes):
                if ch.name is None or self.configs.get(ch.name) is not ch.tc:
                    continue
                before = self.durable.get(ch.name)
                if before is None:
                    del self.configs[ch.name]
                    self.laid.remove(ch.name)
                else:
                    self.configs[ch.name] = before
                    self.laid.put(ch.name, before)

    def ensure_queue_dirs(self) -> None:
        for name, tc in self.configs.items():
            self._ensure_dirs(name, tc)

    def _ensure_dirs(self, name: str, tc: dict, made: list[str] | None = None) -> None:
        """A topic's consume-queue directory and one for each of its queues, files or not:
        recovery reads a missing one as deleted (and rebuilds it from the CommitLog).  A directory
        made is added to ``made``."""
        for path in (os.path.dirname(queue_dir(self.cfg.root, name, 0)),
                     *(queue_dir(self.cfg.root, name, q) for q in range(queue_nums(tc)))):
            if not os.path.isdir(path):
                os.makedirs(path)
                if made is not None:
                    made.append(path)

    def _set_configs(self, configs: dict, version: dict) -> None:
        self.configs, self.durable = dict(configs), dict(configs)
        self.laid = configfile.Members("topicConfigTable", self.configs)
        self.data_version = version
        self._show_data_version(version)

    def _show_data_version(self, version: dict) -> None:
        """topics.json's dataVersion in the control block, where a registration of changed topics
        reads it (a name server takes a broker's topics only under a new one)."""
        self.control[C.TOPICS_DATA_VERSION_TS] = int(version.get("timestamp", 0))
        self.control[C.TOPICS_DATA_VERSION] = int(version.get("counter", 0))

    def _publish(self, name: str, tc: dict) -> int:
        raw = _shared_name(name)
        known = self.index.get(name)
        new = known is None
        if known is None:
            i = int(self.control[C.TOPIC_COUNT])
            if i >= len(self.names):
                raise TableFull(f"shared topic table is full ({len(self.names)} topics, see shmTopicSlots)")
            self.names[i] = raw
        else:
            i = known
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


def _shared_name(name: str) -> bytes:
    """The name as the shared table holds it, or ValueError when it does not fit."""
    raw = name.encode()
    if len(raw) >= NAME_BYTES:
        raise ValueError(f"topic name too long for the shared table: {name!r}")
    return raw
