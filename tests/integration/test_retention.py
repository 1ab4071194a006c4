"""Retention as RocketMQ 4.9.8's: expired CommitLog files go at the deleteWhen hours (never the
newest), the consume-queue files that point only at them go too, each queue's min offset moves,
and a consumer behind it is told OFFSET_MOVED and goes on from the new minimum."""
from __future__ import annotations

import os
import time

from appliance.check import check, scan_commitlog
from remoting.codes import RequestCode as R, ResponseCode as RC
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
