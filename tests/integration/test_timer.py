"""Timers through the whole appliance (store/timer.py, scheduler/timers.py, readers/timers.py): a
5.x-style TIMER_DELAY_MS / TIMER_DELIVER_MS message arrives at its time, not before; one in the
past at once; one past the horizon is refused with 13 and 5.x's remark, nothing stored; a DELAY
level wins over a timer; a cancelled timer never arrives, and cancelling what is not pending is
answered 22 or 13; the real Java 4.9.8 client's timer arrives on time; and 10,000 pending delayed
messages and timers survive kill -9 of every role and of the whole appliance."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from rocketbox.client.admin import Admin
from rocketbox.client.errors import MQBrokerError
from rocketbox.client.message import Message
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from tests.integration import javaclient
from tests.integration.harness import read_topic
from tests.integration.test_delay import _arrival, _producer
from tests.integration.wire import Wire


def _cli(app, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rocketbox.appliance", *argv, "-n", app.namesrv, "-c", app.conf],
                          capture_output=True, text=True, timeout=60)


def test_timers_arrive_on_time_bad_ones_are_refused_and_a_cancelled_one_never_arrives(appliance_factory):
    app = appliance_factory(namesrv=True, messageDelayLevel="1s 2s", timerMaxDelaySec="3600").start()

    async def run():
        p = await _producer(app, "Timed")
        sent_at = time.time()
        soon = await p.send(Message("Timed", b"in-1500-ms", delay_ms=1500))
        past = await p.send(Message("Timed", b"in-the-past", deliver_time_ms=int(time.time() * 1000) - 60_000))
        await p.send(Message("Timed", b"level-wins", delay_level=1, delay_ms=30_000))
        doomed = await p.send(Message("Timed", b"cancelled", delay_ms=6000))
        far = await p.send(Message("Timed", b"an-hour", properties={"TIMER_DELAY_SEC": "3000"}))
        refused = []
        for props in ({"TIMER_DELAY_SEC": "3601"}, {"TIMER_DELAY_MS": "soon"}):
            try:
                await p.send(Message("Timed", b"refused", properties=props))
            except MQBrokerError as e:
                refused.append((e.code, str(e)))
        at_once = [m.body for m in await read_topic(app, "Timed")]
        cancel = _cli(app, "timer-cancel", "-m", doomed.msg_id)
        listed = _cli(app, "delayed")
        async with Admin(app.namesrv) as admin:
            try:
                await admin.cancel_timer("0" * 32)
            except MQBrokerError as e:
                unknown = e.code
        arrived, got = await _arrival(app, "Timed", b"in-1500-ms")
        level_at, level_got = await _arrival(app, "Timed", b"level-wins")
        await asyncio.sleep(2.6 - (time.time() - sent_at))
        async with Admin(app.namesrv) as admin:
            try:
                await admin.cancel_timer(soon.msg_id)
            except MQBrokerError as e:
                too_late = (e.code, str(e))
            pending = await admin.timers()
        await asyncio.sleep(6.6 - (time.time() - sent_at))             # the cancelled one was due
        bodies = [m.body for m in await read_topic(app, "Timed")]
        await p.shutdown()
        return (sent_at, soon, past, far, refused, at_once, cancel, listed, unknown, arrived, got, level_at, level_got,
                too_late, pending, bodies)

    (sent_at, soon, past, far, refused, at_once, cancel, listed, unknown, arrived, got, level_at, level_got, too_late,
     pending, bodies) = asyncio.run(run())
    assert b"in-the-past" in at_once and b"in-1500-ms" not in at_once and b"cancelled" not in at_once
    assert past.status == "SEND_OK" and far.status == "SEND_OK"
    assert [c for c, _ in refused] == [RC.MESSAGE_ILLEGAL] * 2 and "max delay 3600000ms" in refused[0][1], refused
    assert got and 1.5 <= arrived - sent_at < 2.1, arrived - sent_at
    m = got[0]
    assert m.msg_id == soon.msg_id and m.store_timestamp >= int(m.properties["TIMER_OUT_MS"])
    assert m.properties["REAL_TOPIC"] == "Timed" and m.properties["TIMER_DELAY_MS"] == "1500"
    assert level_got and level_at - sent_at < 2.5 and "TIMER_DELAY_MS" not in level_got[0].properties   # the level won
    assert cancel.returncode == 0 and "cancelled" in cancel.stdout, cancel.stderr
    assert "#Timers" in listed.stdout and listed.returncode == 0, listed.stderr
    assert unknown == RC.QUERY_NOT_FOUND
    assert too_late[0] == RC.MESSAGE_ILLEGAL and "was due at" in too_late[1]
    assert bodies.count(b"cancelled") == 0 and bodies.count(b"in-1500-ms") == 1 and b"refused" not in bodies
    assert [(n, due > 0) for _b, n, due in pending] == [(1, True)]          # the hour-long one
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        info = json.loads(w.call(R.GET_BROKER_RUNTIME_INFO).body)["table"]
    finally:
        w.close()
    assert info["timerPending"] == "1", info
    assert app.stop() == 0
    cp = json.load(open(os.path.join(app.cfg.config_dir, "timerCheckpoint.json")))
    assert cp["pending"] == 1 and cp["scannedOffset"] == 4, cp      # 3 timers and the marker; 1 left


def test_the_java_client_timer_arrives_on_time(appliance_factory, java_classes, tmp_path):
    """The real RocketMQ 4.9.8 client with a 5.x property (TIMER_DELAY_MS=3000): ± 0.3 s."""
    app = appliance_factory(namesrv=True).start()
    out = javaclient.run(java_classes, "DelayRoundTrip", app.namesrv, "JavaTimed", "ms:3000", "12000",
                         logs=str(tmp_path / "java-logs"))
    lines = dict(line.split("=", 1) for line in out.split() if "=" in line)
    assert lines["status"] == "SEND_OK" and lines["received"] == "true", out
    assert 2700 <= int(lines["received_after_ms"]) <= 3300, out
    assert lines["real_topic"] == "JavaTimed" and lines["timer_out"] != "null" and lines["body"] == "delayed", out
    assert app.stop() == 0


ROLES = ("scheduler", "dispatcher", "writer", "flusher", "cleaner", "reader-0", "reader-1")


@pytest.mark.slow                 # kills: the whole suite, not the fast lane
def test_pending_delays_and_timers_survive_kill9_of_every_role_and_of_the_whole_appliance(appliance_factory):
    """10,000 pending: 4,000 at levels, 6,000 timers due 8 to 14 s after their send.  Each role is
    killed -9 in turn (the supervisor restarts it), then the whole appliance; after the restart
    each acknowledged one arrives, none before its time, none lost; a clean restart after that
    delivers none again."""
    app = appliance_factory(namesrv=True, messageDelayLevel="8s 10s").start()

    async def send() -> dict[str, int]:
        p = await _producer(app, "Survivors")
        due: dict[str, int] = {}
        for k in range(0, 10_000, 200):
            msgs = []
            for i in range(k, k + 200):
                if i < 4000:
                    msgs.append(Message("Survivors", b"L%d" % i, delay_level=1 + i % 2))
                else:
                    msgs.append(Message("Survivors", b"T%d" % i, delay_ms=8000 + (i % 60) * 100))
            for m, r in zip(msgs, await asyncio.gather(*(p.send(m) for m in msgs))):
                if r.status == "SEND_OK":
                    due[r.msg_id] = (8000 + 2000 * ((int(m.body[1:]) % 2))) if m.delay_level else m.delay_ms
        await p.shutdown()
        return due

    t0 = time.time()
    wait = asyncio.run(send())
    assert len(wait) == 10_000, len(wait)
    print(f"10,000 sent in {time.time() - t0:.1f} s; the first are due 8 s after their send")
    for role in ROLES:
        old = app.role_pid(role)
        os.kill(old, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if app.role_pid(role) != old:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
    app.kill9()
    app.start()
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        got = [m for m in asyncio.run(read_topic(app, "Survivors")) if m.body != b"init"]
        if {m.msg_id for m in got} >= set(wait):
            break
        time.sleep(1)
    assert {m.msg_id for m in got} == set(wait), len(set(wait) - {m.msg_id for m in got})     # none lost
    early = [m for m in got if m.store_timestamp < m.born_timestamp + wait[m.msg_id]]
    assert not early, [(m.body, m.store_timestamp - m.born_timestamp) for m in early[:3]]
    assert app.stop() == 0
    app.start()
    time.sleep(2)
    assert len([m for m in asyncio.run(read_topic(app, "Survivors")) if m.body != b"init"]) == len(got)
    assert app.stop() == 0
