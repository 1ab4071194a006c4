"""Queue locks of orderly consumers: LOCK_BATCH_MQ and UNLOCK_BATCH_MQ (broker:
client/rebalance/RebalanceLockManager.java, FACTS §3 LockBatchRequestBody).

A push consumer that consumes in order (Java's MessageListenerOrderly, the C++ client's
``orderly=True``) locks each queue it is given on the broker, every 20 s, and consumes only the
queues it holds, so that two members never consume one queue at once while they rebalance.  A
lock is the group's for a (topic, broker, queue): a client gets it when nobody holds it, when it
holds it already (its time is refreshed), or when the holder has not refreshed it for 60 s
(``lockMaxLiveTime``, a consumer that died).  Unlocking frees only the caller's own locks.

A client may lock through one reader and its group's other members through another, so the table
is the appliance's, not a reader's: a directory beside the shared segments with a small JSON file
per consumer group (named by a hash of the group, and keyed by the group inside, so two groups
that share a file are still apart), each change made under the file's ``flock`` (released by the
kernel if a reader dies holding it).  A request reads and writes only its own group's file: one
table for all groups cost ~16 ms per request with 1,000 groups of 16 locked queues (a consumer
asks every 20 s), in the reader's loop.  Like RocketMQ's, the table is soft state: the supervisor
removes the directory at start and stop (``SharedState.locks_dir``), and a file that does not
parse (a reader killed mid-write) is read as empty, which at worst lets a lock move before its
60 s are up.  A group that holds nothing keeps an empty file (an inode, no page) until then.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
from contextlib import contextmanager

from rocketbox.store.configfile import loads_object

log = logging.getLogger("rocketbox.reader")
LOCK_MAX_LIVE_MS = 60_000          # rocketmq.broker.rebalance.lockMaxLiveTime


def parse_lock_body(body: bytes) -> tuple[str, str, list[dict]]:
    """A Lock/UnlockBatchRequestBody -> (group, client id, [{brokerName, queueId, topic}]), or
    ValueError naming what does not fit."""
    data = loads_object(body)
    group, client_id, mqs = data.get("consumerGroup"), data.get("clientId"), data.get("mqSet")
    if not isinstance(group, str) or not group:
        raise ValueError("no consumerGroup")
    if not isinstance(client_id, str) or not client_id:
        raise ValueError("no clientId")
    if mqs is None:
        mqs = []
    if not isinstance(mqs, list):
        raise ValueError("mqSet is not a list")
    out = []
    for mq in mqs:
        try:
            topic, broker, qid = mq["topic"], mq["brokerName"], int(mq["queueId"])
        except (TypeError, KeyError, ValueError):
            raise ValueError(f"mqSet entry {str(mq)[:120]} is not a {{brokerName, queueId, topic}}") from None
        if not isinstance(topic, str) or not isinstance(broker, str):
            raise ValueError(f"mqSet entry {str(mq)[:120]} has a topic or brokerName that is not text")
        out.append({"brokerName": broker, "queueId": qid, "topic": topic})
    return group, client_id, out


def _key(mq: dict) -> str:
    return json.dumps([mq["topic"], mq["brokerName"], mq["queueId"]])


class QueueLocks:
    def __init__(self, directory: str):
        self.directory = directory

    def path(self, group: str) -> str:
        return os.path.join(self.directory, hashlib.blake2b(group.encode(), digest_size=16).hexdigest())

    @contextmanager
    def _table(self, group: str):
        """The group's locks under its file's lock (the directory and file made by the first
        request), written back when the block leaves without error."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        path = self.path(group)
        with os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o600), "r+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            text = f.read()
            try:
                tables = json.loads(text) if text else {}
            except ValueError:
                log.warning("queue lock table %s (group %s) does not parse; starting it empty", path, group)
                tables = {}
            locks = tables.setdefault(group, {})
            yield locks
            if not locks:
                del tables[group]
            f.seek(0)
            f.write(json.dumps(tables) if tables else "")
            f.truncate()

    def try_lock(self, group: str, client_id: str, mqs: list[dict], now_ms: int) -> list[dict]:
        """The queues of ``mqs`` that ``client_id`` holds once this returns (tryLockBatch)."""
        got = []
        with self._table(group) as locks:
            for mq in mqs:
                k = _key(mq)
                holder = locks.get(k)
                if holder is not None and holder[0] != client_id:
                    if now_ms - holder[1] <= LOCK_MAX_LIVE_MS:
                        continue                   # locked by another member
                    log.warning("queue lock of %s in group %s expired (%s); %s gets it", k, group, holder[0], client_id)
                locks[k] = [client_id, now_ms]
                got.append(mq)
        return got

    def unlock(self, group: str, client_id: str, mqs: list[dict]) -> None:
        """Frees the queues of ``mqs`` that ``client_id`` holds (unlockBatch)."""
        with self._table(group) as locks:
            for mq in mqs:
                k = _key(mq)
                if locks.get(k, [None])[0] == client_id:
                    del locks[k]
