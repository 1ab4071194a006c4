"""The appliance as systemd runs it (systemd/, issue #39): ``appliance run store`` keeps the store
(lock, shared memory, recovery) and tells systemd it is ready (sd_notify READY=1); each role runs
as a process of its own with ``appliance run ROLE``; ``appliance stopping`` marks the stop as the
whole appliance's, the roles stop in reverse order and finish it, and the keeper's stop is clean:
abort marker gone, shared memory unlinked.  No systemd here: the test is its stand-in."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from rocketbox.appliance.roles import roles_for
from rocketbox.remoting.codes import ResponseCode as RC
from tests.integration.harness import Appliance, create_topic
from tests.integration.test_readers import send_v2
from tests.integration.wire import Wire


def test_the_keeper_and_roles_run_apart_and_stop_cleanly(tmp_path):
    app = Appliance(tmp_path, readerProcessNums=1)
    sock_path = str(tmp_path / "notify")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(sock_path)
    notify.settimeout(30)
    env = dict(os.environ, NOTIFY_SOCKET=sock_path)
    run = [sys.executable, "-m", "rocketbox.appliance", "run"]
    log = open(tmp_path / "roles.log", "wb")
    keeper = subprocess.Popen(run + ["store", "-c", app.conf], env=env, stdout=log, stderr=subprocess.STDOUT)
    roles: dict[str, subprocess.Popen] = {}
    try:
        assert notify.recv(64) == b"READY=1"                     # locked, created, recovered
        assert os.path.exists(os.path.join(app.cfg.root, "lock"))
        for role in roles_for(app.cfg):                          # in the supervisor's start order
            roles[role] = subprocess.Popen(run + [role, "-c", app.conf], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while subprocess.run(run[:-1] + ["status", "-c", app.conf], capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, open(tmp_path / "roles.log").read()[-3000:]
            time.sleep(0.3)
        while not app.serving():                                # HAProxy has seen the reader
            assert time.monotonic() < deadline + 30
            time.sleep(0.3)
        create_topic(app, "Kept", 2)
        w = Wire("127.0.0.1", app.cfg.listenPort)
        try:
            assert send_v2(w, "Kept", b"kept").code == RC.SUCCESS
        finally:
            w.close()
        out = subprocess.run(run[:-1] + ["stopping", "-c", app.conf], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        for role in reversed(list(roles)):                       # systemd's stop order: the reverse of the start's
            roles[role].send_signal(signal.SIGTERM)
            assert roles[role].wait(60) == 0, role
        keeper.send_signal(signal.SIGTERM)
        assert keeper.wait(60) == 0
    finally:
        for p in [*roles.values(), keeper]:
            if p.poll() is None:
                p.kill()
                p.wait()
        notify.close()
        log.close()
    text = open(tmp_path / "roles.log").read()
    assert "rocketbox stopped cleanly" in text, text[-3000:]
    assert not os.path.exists(os.path.join(app.cfg.root, "abort"))
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(app.cfg.shmPrefix.strip("/"))]
