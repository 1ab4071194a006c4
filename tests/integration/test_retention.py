"""Retention as RocketMQ 4.9.8's: expired CommitLog files go at the deleteWhen hours (never the
newest), the consume-queue files that point only at them go too, each queue's min offset moves,
and a consumer behind it is told OFFSET_MOVED and goes on from the new minimum."""
from __future__ import annotations

import os
import time

from rocketbox.appliance.check import check, scan_commitlog
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.store import topicjournal
from tests.integration.harness import start_producer
from tests.integration.test_readers import bodies, pull
from tests.integration.wire import Wire

FILE = 256 * 1024


def _min_offsets(w: Wire) -> list[int]:
    return [int(w.call(R.GET_MIN_OFFSET, {"topic": "TBW102", "queueId": str(q)}).ext["offset"]) for q in range(4)]


def test_expired_files_go_at_the_delete_hour_and_consumers_move_on(appliance_factory):
    every_hour = ";".join(f"{h:02d}" for h in range(24))
    app = appliance_factory(mappedFileSizeCommitLog=FILE, mappedFileSizeConsumeQueue=2000, fileReservedTime="1",
                            deleteWhen=every_hour, cleanResourceInterval="300").start()
    ack = os.path.join(app.dir, "acks")
    p = start_producer(app, "r", "TBW102", 4000, 4, ack, batch=50)
    assert p.wait(120) == 0, p.stderr.read()
    names = sorted(os.listdir(app.cfg.commitlog_dir))
    assert len(names) >= 4
    w = Wire("127.0.0.1", app.cfg.listenPort)
    time.sleep(1)
    assert _min_offsets(w) == [0, 0, 0, 0]                  # nothing has expired: nothing goes
    for group, q, at in [("caught-up", q, 1000) for q in range(4)] + [("behind", 0, 100)]:
        assert w.call(R.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": "TBW102", "queueId": str(q),
                                                 "commitOffset": str(at)}).code == RC.SUCCESS
    old = time.time() - 2 * 3600
    for n in names:                                          # every file two hours old, the newest too
        os.utime(os.path.join(app.cfg.commitlog_dir, n), (old, old))
    deadline = time.monotonic() + 10
    while sorted(os.listdir(app.cfg.commitlog_dir)) != names[-1:] or 0 in _min_offsets(w):
        assert time.monotonic() < deadline, (os.listdir(app.cfg.commitlog_dir), _min_offsets(w))
        time.sleep(0.2)
    mins = _min_offsets(w)
    r = pull(w, "TBW102", 0, queue=1)
    assert r.code == RC.PULL_OFFSET_MOVED and int(r.ext["nextBeginOffset"]) == mins[1], (r.code, r.ext)
    got = []
    for q in range(4):
        at = mins[q]
        while (r := pull(w, "TBW102", at, queue=q)).code == RC.SUCCESS:
            got += bodies(r)
            at = int(r.ext["nextBeginOffset"])
    w.close()
    assert "retention deleted" in app.log_text()
    # what it cost each group (#49): nothing to the one that had consumed everything, the rest of
    # queue 0 below the new minimum to the one committed at 100, a WARNING, counted in status
    import re
    costs = re.findall(r"(WARNING|INFO) retention deleted .* per group: (.*?)(?: \(\d+ unconsumed|$)", app.log_text(), re.M)
    assert costs
    behind = sum(int(n) for _lvl, line in costs for n in re.findall(r"behind on TBW102: (\d+)", line))
    assert behind == mins[0] - 100 > 0
    assert all(re.search(r"caught-up on TBW102: 0\b", line) for _lvl, line in costs)
    assert "WARNING" in {lvl for lvl, _ in costs}
    assert f"{mins[0] - 100} messages deleted by retention before a group consumed them" in app.cmd("status").stdout
    assert app.stop() == 0
    kept = [r for _p, r in scan_commitlog(app.cfg)]
    assert sorted(got) == sorted(r.body for r in kept) and len(kept) < 4000
    assert [sum(1 for r in kept if r.queue_id == q) for q in range(4)] == [4000 // 4 - m for m in mins]
    for q in range(4):                                       # consume-queue files of the deleted part went
        cq_files = os.listdir(os.path.join(app.cfg.root, "consumequeue", "TBW102", str(q)))
        assert int(min(cq_files)) // 20 + 100 > mins[q], (q, sorted(cq_files), mins[q])
    rep = check(app.cfg)
    assert rep.clean, rep.problems[:5]
    app.start()                                              # the min offsets hold across a restart
    w = Wire("127.0.0.1", app.cfg.listenPort)
    assert _min_offsets(w) == mins
    w.close()
    assert app.stop() == 0


def test_a_topics_own_retention_and_a_purge_hide_its_older_messages(appliance_factory):
    """Beyond 4.x: a topic's retentionMs and a purge move its queues' min offsets past what is
    older, while the shared CommitLog file stays; topics.json keeps them through an update that does
    not name them (as mqadmin updateTopic sends) and a restart."""
    from rocketbox.store.configfile import read
    from tests.integration.harness import create_topic
    from tests.integration.test_readers import send_v2
    app = appliance_factory(namesrv=True, cleanResourceInterval="200").start()
    create_topic(app, "Short", 2)
    create_topic(app, "Other", 1)
    w = Wire("127.0.0.1", app.cfg.listenPort)
    for i in range(6):
        assert send_v2(w, "Short", b"old-%d" % i, queue=i % 2).code == RC.SUCCESS
    assert send_v2(w, "Other", b"kept").code == RC.SUCCESS
    purge = app.cmd("retention", "-t", "Short", "--purge")
    assert purge.returncode == 0 and "purged" in purge.stdout, purge.stdout + purge.stderr

    def mins(topic, n):
        return [int(w.call(R.GET_MIN_OFFSET, {"topic": topic, "queueId": str(q)}).ext["offset"]) for q in range(n)]
    deadline = time.monotonic() + 10
    while mins("Short", 2) != [3, 3]:
        assert time.monotonic() < deadline, mins("Short", 2)
        time.sleep(0.1)
    assert mins("Other", 1) == [0]                              # other topics untouched
    r = pull(w, "Short", 0, queue=0)
    assert r.code == RC.PULL_OFFSET_MOVED and r.ext["nextBeginOffset"] == "3"
    assert send_v2(w, "Short", b"new", queue=0).code == RC.SUCCESS
    r = pull(w, "Short", 3, queue=0, suspend_ms=3000, flag=2)      # (held until it is dispatched)
    assert r.code == RC.SUCCESS and bodies(r) == [b"new"]            # what came after the purge is there

    create_topic(app, "Pq", 2)                                   # a purge of one queue
    for i in range(4):
        assert send_v2(w, "Pq", b"pq-%d" % i, queue=i % 2).code == RC.SUCCESS
    time.sleep(0.3)
    one = app.cmd("retention", "-t", "Pq", "--purge", "-q", "1")
    assert one.returncode == 0 and "Pq queue 1: purged" in one.stdout, one.stdout + one.stderr
    deadline = time.monotonic() + 10
    while mins("Pq", 2) != [0, 2]:
        assert time.monotonic() < deadline, mins("Pq", 2)
        time.sleep(0.1)
    retention = app.cmd("retention", "-t", "Short", "--hours", "0.0005")   # 1.8 s
    assert retention.returncode == 0, retention.stderr
    create_topic(app, "Short", 2)                                # an update that does not name them keeps them
    table = topicjournal.read(app.cfg.config_dir)["topicConfigTable"]           # topics.json and its journal
    tc = table["Short"]
    assert tc["retentionMs"] == 1800 and tc["purgedBeforeMs"] > 0 and "retentionMs" not in table["Other"]
    deadline = time.monotonic() + 10
    while mins("Short", 2) != [4, 3]:                            # "new" aged out too
        assert time.monotonic() < deadline, mins("Short", 2)
        time.sleep(0.1)
    w.close()
    assert app.stop() == 0
    assert len(os.listdir(app.cfg.commitlog_dir)) == 1           # the bytes are still in the CommitLog
    assert sum(1 for _p, r in scan_commitlog(app.cfg) if r.topic == "Short") == 7
    assert read(os.path.join(app.cfg.config_dir, "topics.json"))["topicConfigTable"]["Pq"]["purgedQueues"].keys() == {"1"}
    app.start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    deadline = time.monotonic() + 10
    while mins("Short", 2) != [4, 3] or mins("Pq", 2) != [0, 2]:   # and stays hidden after a restart
        assert time.monotonic() < deadline, (mins("Short", 2), mins("Pq", 2))
        time.sleep(0.1)
    w.close()
    assert app.stop() == 0
