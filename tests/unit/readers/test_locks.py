"""Orderly consumers' queue locks (readers/locks.py), as RocketMQ's RebalanceLockManager: a queue
is one client's until it unlocks it or lets 60 s pass without locking it again; bodies that do not
fit LockBatchRequestBody are refused with what is wrong."""
import json
import os

import pytest

from rocketbox.readers.locks import LOCK_MAX_LIVE_MS, QueueLocks, parse_lock_body


def mq(q: int, topic: str = "T") -> dict:
    return {"brokerName": "b1", "queueId": q, "topic": topic}


def test_a_queue_is_one_clients_until_unlocked_or_expired(tmp_path):
    path = str(tmp_path / "locks")
    a, b = QueueLocks(path), QueueLocks(path)          # two readers on one table
    t = 10**12
    assert a.try_lock("g", "A", [mq(0), mq(1)], t) == [mq(0), mq(1)]
    assert b.try_lock("g", "B", [mq(1), mq(2)], t + 1) == [mq(2)]           # 1 is A's
    assert b.try_lock("other", "B", [mq(1)], t + 1) == [mq(1)]             # per group
    assert a.try_lock("g", "A", [mq(0), mq(1), mq(2)], t + 2) == [mq(0), mq(1)]   # A's again (refreshed); 2 is B's
    b.unlock("g", "B", [mq(0), mq(2)])                                      # only its own: 2
    assert a.try_lock("g", "A", [mq(2)], t + 3) == [mq(2)]
    assert b.try_lock("g", "B", [mq(0)], t + 2 + LOCK_MAX_LIVE_MS) == []    # refreshed at t+2: not expired yet
    assert b.try_lock("g", "B", [mq(0)], t + 3 + LOCK_MAX_LIVE_MS) == [mq(0)]   # expired: B's
    a.unlock("g", "A", [mq(1), mq(2)])
    b.unlock("g", "B", [mq(0)])
    b.unlock("other", "B", [mq(1)])
    files = sorted((tmp_path / "locks").iterdir())
    assert [f.name for f in files] == sorted(os.path.basename(a.path(g)) for g in ("g", "other"))   # a file per group
    assert [f.read_text() for f in files] == ["", ""]                       # nothing held, nothing kept


def test_a_table_that_does_not_parse_is_read_as_empty_and_touches_no_other_group(tmp_path, caplog):
    locks = QueueLocks(str(tmp_path / "locks"))
    assert locks.try_lock("h", "B", [mq(0)], 1) == [mq(0)]
    with open(locks.path("g"), "w") as f:
        f.write('{"g": {"[\\"T\\", ')                                     # a reader killed mid-write
    assert locks.try_lock("g", "A", [mq(0)], 1) == [mq(0)]
    assert "does not parse" in caplog.text
    with open(locks.path("g")) as f:
        assert json.load(f) == {"g": {json.dumps(["T", "b1", 0]): ["A", 1]}}
    assert locks.try_lock("h", "C", [mq(0)], 2) == []                       # still B's


def test_groups_that_share_a_file_stay_apart(tmp_path, monkeypatch):
    locks = QueueLocks(str(tmp_path / "locks"))
    monkeypatch.setattr(locks, "path", lambda _group: str(tmp_path / "locks" / "one"))    # a hash collision
    assert locks.try_lock("g", "A", [mq(0)], 1) == [mq(0)]
    assert locks.try_lock("h", "B", [mq(0)], 1) == [mq(0)]
    locks.unlock("g", "A", [mq(0)])
    assert locks.try_lock("h", "C", [mq(0)], 2) == []
    assert json.loads((tmp_path / "locks" / "one").read_text()) == {"h": {json.dumps(["T", "b1", 0]): ["B", 1]}}


def test_lock_bodies_as_clients_send_them_and_what_is_refused():
    body = b'{"clientId":"1.2.3.4@9","consumerGroup":"g","mqSet":[{"brokerName":"b1","queueId":"3","topic":"T"}]}'
    assert parse_lock_body(body) == ("g", "1.2.3.4@9", [mq(3)])
    assert parse_lock_body(b'{"clientId":"c","consumerGroup":"g"}') == ("g", "c", [])
    for bad, says in ((b"[1]", "not a JSON object"), (b"\xff", "not JSON"), (b'{"clientId":"c"}', "no consumerGroup"),
                      (b'{"consumerGroup":"g"}', "no clientId"),
                      (b'{"clientId":"c","consumerGroup":"g","mqSet":{}}', "mqSet is not a list"),
                      (b'{"clientId":"c","consumerGroup":"g","mqSet":[{"topic":"T"}]}', "is not a {brokerName"),
                      (b'{"clientId":"c","consumerGroup":"g","mqSet":[{"topic":1,"brokerName":"b","queueId":0}]}',
                       "not text")):
        with pytest.raises(ValueError, match=says.replace("{", "\\{")):
            parse_lock_body(bad)
