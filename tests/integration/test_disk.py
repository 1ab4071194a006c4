"""A full disk, on a real small tmpfs under a whole appliance: above diskSpaceWarningLevelRatio sends
are refused with SERVICE_NOT_AVAILABLE and RocketMQ's remark and resume by themselves below it;
when a consume-queue file cannot be made, no role exits, sends are refused, and what was acknowledged
becomes consumable once there is room; each state change is logged once."""
from __future__ import annotations

import os
import time

import pytest

from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from tests.integration.harness import create_topic
from tests.integration.test_readers import pull_n, send_v2
from tests.integration.wire import Wire

REMARK = ("service not available now. It may be caused by one of the following reasons: the broker's disk is "
          "full [CL: ")


@pytest.fixture
def small_fs(tmpfs):
    return tmpfs("24m")


def _fill(path: str, leave: int = 0) -> None:
    """Write a ballast file until only ``leave`` bytes are free (0: until the disk refuses)."""
    st = os.statvfs(os.path.dirname(path))
    room = st.f_bavail * st.f_frsize - leave
    with open(path, "wb") as f:
        try:
            while room > 0:
                room -= f.write(b"\xa5" * min(room, 1 << 20))
                f.flush()
        except OSError:
            pass


def _until(fn, timeout: float = 10):
    deadline = time.monotonic() + timeout
    while not (v := fn()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
    return v


def test_sends_are_refused_above_the_warning_level_and_resume_below_it(appliance_factory, small_fs):
    app = appliance_factory(storePathRootDir=str(small_fs / "store")).start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    create_topic(app, "D", 1)
    assert send_v2(w, "D", b"before").code == RC.SUCCESS
    ballast = str(small_fs / "ballast")
    st = os.statvfs(str(small_fs))
    _fill(ballast, leave=st.f_blocks * st.f_frsize * 5 // 100)          # 95% used
    _until(lambda: "disk full:" in app.log_text())                        # the cleaner looks every second
    refused = send_v2(w, "D", b"while full")
    assert refused.code == RC.SERVICE_NOT_AVAILABLE and refused.remark.startswith(REMARK), refused.remark
    assert " INDEX:  0.9" in refused.remark, refused.remark
    assert pull_n(w, "D", 1) == [b"before"]                                 # reads go on
    os.unlink(ballast)
    _until(lambda: send_v2(w, "D", b"after").code == RC.SUCCESS)
    got = pull_n(w, "D", 2)
    w.close()
    assert app.stop() == 0
    assert got[0] == b"before" and b"while full" not in got and got[-1] == b"after"
    log = app.log_text()
    assert log.count("cleaner") and log.count("disk full:") == 1 and log.count("disk no longer full") == 1


def test_consume_queues_wait_for_room_and_no_role_exits(appliance_factory, small_fs):
    app = appliance_factory(storePathRootDir=str(small_fs / "store"), diskSpaceWarningLevelRatio="100").start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    create_topic(app, "New", 1)
    assert send_v2(w, "TBW102", b"warm").code == RC.SUCCESS            # the CommitLog file is there
    pids = {role: app.role_pid(role) for role in ("writer", "dispatcher", "flusher", "cleaner")}
    ballast = str(small_fs / "ballast")
    _fill(ballast)
    first = send_v2(w, "New", b"m0")                                     # its consume-queue file cannot be made
    assert first.code == RC.SUCCESS
    _until(lambda: "consume queues and index wait: the disk is full" in app.log_text())
    refused = send_v2(w, "New", b"refused")                               # nothing more is acknowledged
    assert refused.code == RC.SERVICE_NOT_AVAILABLE and refused.remark.startswith(REMARK), refused.remark
    time.sleep(2.5)                                                        # (a few retries)
    assert w.call(R.GET_MAX_OFFSET, {"topic": "New", "queueId": "0"}).ext["offset"] == "0"
    assert app.cmd("status").returncode == 0
    assert {role: app.role_pid(role) for role in pids} == pids            # nobody exited
    os.unlink(ballast)
    assert pull_n(w, "New", 1) == [b"m0"]                                # the acknowledged one, once there is room
    _until(lambda: send_v2(w, "New", b"m1").code == RC.SUCCESS)
    assert pull_n(w, "New", 2) == [b"m0", b"m1"]
    w.close()
    assert app.stop() == 0
    log = app.log_text()
    said = [line.split("] ")[1] for line in log.splitlines() if "consume queues and index wait" in line]
    assert len(said) == 2 and said[0].startswith("ERROR") and "cannot reserve" in said[0], said   # once, and once over
    assert said[1].startswith("WARNING") and "over after" in said[1], said
    assert "exited" not in log
