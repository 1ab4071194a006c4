"""Consumer-group state the writer keeps for every reader: committed consumer offsets
(``config/consumerOffset.json`` plus the shared offset table) and subscription groups
(``config/subscriptionGroup.json``).  Readers send updates through their request rings (OFFSET,
GROUP entries, never answered) and read offsets straight from shared memory, so an offset
committed through one reader is what every reader returns.

Offsets reach the file at most ``flushConsumerOffsetInterval`` (5 s) after they change and when
the writer stops, as RocketMQ's broker persists them; the shared table is always current.
"""
from __future__ import annotations

import json
import logging
import os
import time

import numpy as np

from rocketbox.shm.layout import C
from rocketbox.shm.tables import offset_table
from rocketbox.store import configfile
from rocketbox.store.groupconfig import offset_key, subscription_group  # noqa: F401  (their records live in store/)
from rocketbox.writer.filethread import FileThread

log = logging.getLogger("rocketbox.writer")
PERSIST_INTERVAL_S = 5.0          # flushConsumerOffsetInterval


class ConsumerOffsets:
    """Write side of the shared offset table and consumerOffset.json."""

    def __init__(self, cfg, views: dict, control):
        self.path = os.path.join(cfg.config_dir, "consumerOffset.json")
        self.keys, self.qids, self.values = views["offset_keys"], views["offset_qids"], views["offset_values"]
        self.control = control
        self.slot: dict[tuple[bytes, int], int] = {}
        self.names: list[str] = []          # each slot's key, decoded (the file's keys)
        self.dirty, self.persisted_at = False, time.monotonic()
        self.file: FileThread | None = None         # started by the first write

    def load(self) -> None:
        """Boot: consumerOffset.json into the shared table."""
        data = configfile.read(self.path) or {}
        for key, table in (data.get("offsetTable") or {}).items():
            for qid, off in table.items():
                self.set(key.encode(), int(qid), int(off))
        self.dirty = False

    def attach(self) -> None:
        """A restarted writer: the table is already in shared memory."""
        for s in range(int(self.control[C.OFFSET_COUNT])):
            self.slot[(bytes(self.keys[s]), int(self.qids[s]))] = s
            self.names.append(bytes(self.keys[s]).decode())

    def set(self, key: bytes, qid: int, offset: int) -> None:
        s = self.slot.get((key, qid))
        if s is None:
            s = int(self.control[C.OFFSET_COUNT])
            if s >= len(self.keys):
                raise RuntimeError(f"shared offset table is full ({s} offsets, see shmOffsetSlots)")
            self.keys[s], self.qids[s] = key, qid
            self.values[s] = offset
            self.slot[(key, qid)] = s
            self.names.append(key.decode())
            self.control[C.OFFSET_COUNT] = s + 1
        else:
            self.values[s] = offset
        self.dirty = True

    def apply(self, updates: np.ndarray) -> None:
        """An OFFSET ring entry: rows of (key, queue id, offset), applied in order.  A new offset
        the full table cannot take is dropped and counted (readers refuse those already, unless
        several raced for the last slots: the reader then finds it missing once applied, and
        answers its commit with the table-full error); the rows after it are applied all the same."""
        refused = 0
        for key, qid, _pad, offset in updates.tolist():
            if int(self.control[C.OFFSET_COUNT]) < len(self.keys) or (key, qid) in self.slot:
                self.set(key, qid, offset)
            else:
                refused += 1
        if refused:
            log.warning("%d new consumer offsets dropped (their commits are answered 'table is full'): the shared "
                        "offset table is full (%d offsets, see shmOffsetSlots)", refused, len(self.keys))

    def table(self) -> dict:
        """consumerOffset.json's content, read off the shared table's columns in one go (the
        file's keys are sorted when it is written)."""
        n = int(self.control[C.OFFSET_COUNT])
        return {"offsetTable": offset_table(self.names[:n], self.qids[:n], self.values[:n])}

    def persist(self) -> None:
        """In the writer's loop: consumerOffset.json every ``PERSIST_INTERVAL_S`` while offsets
        change, as RocketMQ's broker persists them from a scheduled thread.  The file is written by
        a thread of its own (``writer.filethread``): its encoding (~25 ms at 65,536 offsets) and its
        fsync stalled every send in the loop.  It is a snapshot of offsets read while they may
        move, as RocketMQ's (each value one that was committed).  A write that fails is logged and
        tried again the next period; the offsets stay in the shared table."""
        self._settle()
        if self.dirty and time.monotonic() - self.persisted_at >= PERSIST_INTERVAL_S:
            self._submit()

    def close(self) -> None:
        """The stop: what changed since the last write is written, and the thread ended."""
        self._settle()
        if self.dirty:
            self._submit()
        if self.file is not None:
            self.file.close()
            self._settle()

    def _submit(self) -> None:
        if self.file is None:
            self.file = FileThread("consumerOffset.json", None, self._store)
        self.dirty, self.persisted_at = False, time.monotonic()      # (changes from now on: the next one)
        self.file.submit(None)

    def _settle(self) -> None:
        for _jobs, error in self.file.done() if self.file is not None else ():
            if error is not None:
                self.dirty = True
                log.error("cannot write %s: %s; the offsets stay in shared memory and are tried again in %.0f s",
                          self.path, error, PERSIST_INTERVAL_S)

    def _store(self, _text: None, _jobs: list) -> None:     # the file thread's: the table read outside the lock
        configfile.write_bytes(self.path, configfile.unquote_queue_ids(configfile.dumps(self.table())))


class SubscriptionGroups:
    """subscriptionGroup.json: groups created on a consumer's first heartbeat
    (``autoCreateSubscriptionGroup``) or by an admin.  Readers read the file.  Its writes are a
    thread's (``writer.filethread``): a GROUP entry is never answered, so the loop only logs a
    write that failed; what it held is written with the next change, or at the stop."""

    def __init__(self, cfg):
        self.path = os.path.join(cfg.config_dir, "subscriptionGroup.json")
        data = configfile.read(self.path) or {}
        self.groups: dict[str, dict] = dict(data.get("subscriptionGroupTable") or {})
        self.laid = configfile.Members("subscriptionGroupTable", self.groups)   # as the file lays them out
        self.data_version = data.get("dataVersion", {"counter": 0, "timestamp": int(time.time() * 1000)})
        self.file: FileThread | None = None         # started by the first change
        self.unwritten = False                      # the last write failed

    def upsert(self, payload: bytes) -> None:
        sg = json.loads(payload)
        name = sg["groupName"]
        if self.groups.get(name) == sg:
            return
        if self.file is None:
            self.file = FileThread("subscriptionGroup.json", self._lay_out, self._store)
        with self.file.lock:
            self.groups[name] = sg
            self.laid.put(name, sg)
            self.data_version = {"counter": self.data_version.get("counter", 0) + 1,
                                 "timestamp": int(time.time() * 1000)}
            self.file.submit(name)

    def settle(self) -> None:
        """In the writer's loop: log each write that failed."""
        for names, error in self.file.done() if self.file is not None else ():
            self.unwritten = error is not None
            if error is not None:
                log.error("cannot write %s: %s; groups %s go with the next change", self.path, error, names[:5])

    def close(self) -> None:
        """The stop: pending changes written (a failed one tried once more)."""
        if self.file is not None:
            self.settle()
            if self.unwritten:
                self.file.submit(None)
            self.file.close()
            self.settle()

    def _lay_out(self, _names: list) -> bytes:            # the file thread's, under the lock
        return self.laid.file({"dataVersion": self.data_version})

    def _store(self, text: bytes, _names: list) -> None:  # the file thread's
        configfile.write_bytes(self.path, text)
