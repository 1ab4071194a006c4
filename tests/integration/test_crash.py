"""Crash tests: kill -9 and damaged files, then restart and check that every acknowledged message
is intact, nothing torn is visible, and the store checks clean."""
import collections
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time

from rocketbox.appliance.check import check, scan_commitlog
from rocketbox.store.mappedfile import offset_to_name
from tests.integration.harness import ROOT, read_acks, start_producer, stored_keys


def wait_acks(path, n, timeout=60):
    deadline = time.monotonic() + timeout
    while len(read_acks(path)) < n:
        assert time.monotonic() < deadline, f"only {len(read_acks(path))} acks"
        time.sleep(0.05)


def test_kill9_writer_mid_batch_is_restarted_and_nothing_acked_is_lost_or_doubled(appliance_factory):
    app = appliance_factory().start()
    acks = [os.path.join(app.dir, f"acks{i}") for i in range(2)]
    procs = [start_producer(app, f"w{i}", "TBW102", 4000, 4, acks[i], batch=20) for i in range(2)]
    wait_acks(acks[0], 400)
    old = app.role_pid("writer")
    os.kill(old, signal.SIGKILL)
    for p in procs:
        assert p.wait(120) == 0, p.stderr.read()
    new = app.role_pid("writer")
    assert new != old
    assert "writer exited with -9" in app.log_text()
    assert app.stop() == 0
    acked = [k for f in acks for k in read_acks(f)]
    assert len(acked) > 4000
    stored = stored_keys(app.cfg)
    assert all(stored[k] == 1 for k in acked), [k for k in acked if stored[k] != 1][:5]
    assert max(stored.values()) == 1          # no request appended twice


def test_kill9_whole_appliance_under_sync_flush_keeps_every_acked_message(appliance_factory):
    app = appliance_factory(flushDiskType="SYNC_FLUSH").start()
    acks = [os.path.join(app.dir, f"acks{i}") for i in range(3)]
    procs = [start_producer(app, f"s{i}", "TBW102", 100000, 8, acks[i], sync_wait=True, batch=5) for i in range(3)]
    wait_acks(acks[2], 500)
    app.kill9()
    for p in procs:
        p.kill()
        p.wait()
    assert os.path.exists(os.path.join(app.cfg.root, "abort"))
    acked = [k for f in acks for k in read_acks(f)]
    app.start()
    assert "abnormal exit" in app.log_text()
    assert app.stop() == 0
    stored = stored_keys(app.cfg)
    missing = [k for k in acked if stored[k] != 1]
    assert not missing, missing[:5]
    assert max(stored.values()) == 1


def _last_record(app):
    last = None
    for phys, r in scan_commitlog(app.cfg):
        last = (phys, r)
    return last


def _fill(app, n=200):
    app.start()
    ack = os.path.join(app.dir, "acks")
    p = start_producer(app, "f", "TBW102", n, 2, ack)
    assert p.wait(60) == 0, p.stderr.read()
    assert app.stop() == 0
    return read_acks(ack)


def _damage(app, fn):
    phys, r = _last_record(app)
    fsize = app.cfg.mappedFileSizeCommitLog
    path = os.path.join(app.cfg.commitlog_dir, offset_to_name(phys - phys % fsize))
    with open(path, "r+b") as f:
        fn(f, phys % fsize, r)
    open(os.path.join(app.cfg.root, "abort"), "wb").close()      # as if the process had crashed
    with open(os.path.join(app.cfg.root, "checkpoint"), "r+b") as f:   # before any checkpoint covered it
        f.write(bytes(40))
    return phys, r


def test_truncated_last_record_is_cut_and_the_rest_survives(appliance_factory):
    app = appliance_factory()
    acked = _fill(app)

    def tear(f, at, r):      # the last record half written: its second half never reached the file
        f.seek(at + r.total_size // 2)
        f.write(b"\0" * (r.total_size - r.total_size // 2))
    phys, r = _damage(app, tear)
    app.start()
    assert "cut" in app.log_text() and "abnormal exit" in app.log_text()
    assert app.stop() == 0
    stored = stored_keys(app.cfg)
    lost = r.body.decode().split("body-")[1]
    assert stored[lost] == 0
    assert all(stored[k] == 1 for k in acked if k != lost)
    assert _last_record(app)[0] < phys
    assert check(app.cfg).end_offset == phys


def test_flipped_byte_in_last_record_fails_crc_and_is_cut(appliance_factory):
    app = appliance_factory()
    acked = _fill(app)

    def flip(f, at, r):
        f.seek(at + 90)
        b = f.read(1)
        f.seek(at + 90)
        f.write(bytes([b[0] ^ 0x40]))
    phys, r = _damage(app, flip)
    app.start()
    assert app.stop() == 0
    stored = stored_keys(app.cfg)
    assert sum(stored.values()) == len(acked) - 1
    assert check(app.cfg).end_offset == phys


def test_deleted_consume_queues_are_rebuilt_on_start(appliance_factory):
    app = appliance_factory()
    acked = _fill(app, 500)
    before = {k: [q for q, _p, _b in v] for k, v in check(app.cfg).queues.items()}
    shutil.rmtree(os.path.join(app.cfg.root, "consumequeue", "TBW102"))
    shutil.rmtree(app.cfg.index_dir)
    app.start()
    assert "rebuilding them from the whole CommitLog" in app.log_text()
    assert app.stop() == 0
    rep = check(app.cfg)
    assert rep.clean, rep.problems[:5]
    assert {k: [q for q, _p, _b in v] for k, v in rep.queues.items()} == before
    assert sum(stored_keys(app.cfg).values()) == len(acked) == 500


def test_kill9_dispatcher_and_flusher_mid_load_rebuild_idempotently(appliance_factory):
    app = appliance_factory().start()
    acks = [os.path.join(app.dir, f"acks{i}") for i in range(2)]
    procs = [start_producer(app, f"d{i}", "TBW102", 3000, 4, acks[i], batch=10) for i in range(2)]
    wait_acks(acks[0], 300)
    os.kill(app.role_pid("dispatcher"), signal.SIGKILL)
    wait_acks(acks[0], 1200)
    os.kill(app.role_pid("flusher"), signal.SIGKILL)
    for p in procs:
        assert p.wait(120) == 0, p.stderr.read()
    assert app.stop() == 0             # even if a role is still in its restart back-off
    log = app.log_text()
    assert "dispatcher exited with -9" in log and "flusher exited with -9" in log
    assert not os.path.exists(os.path.join(app.cfg.root, "abort"))
    stored = stored_keys(app.cfg)          # every CQ entry and index key exactly where it belongs
    acked = [k for f in acks for k in read_acks(f)]
    assert len(acked) == 6000 and all(stored[k] == 1 for k in acked)


def test_random_kills_of_every_role_under_client_sends_lose_no_acknowledged_message(appliance_factory):
    """Our producer through HAProxy, SYNC_FLUSH, while one role after another (readers, HAProxy,
    writer, dispatcher, flusher; each twice, in a shuffled order) is killed -9 every 0.4-1.2 s.
    Every acknowledged send is in the store; a message is stored twice only as two tries (the
    client retried a try whose reply never came, RocketMQ's at-least-once), never one try twice;
    the store checks clean."""
    import asyncio
    import random

    from rocketbox.client.message import Message
    from rocketbox.client.producer import Producer
    app = appliance_factory(namesrv=True, flushDiskType="SYNC_FLUSH").start()
    rng, acked, kills, done = random.Random(7), [], [], asyncio.Event()

    async def produce(name: str) -> None:
        async with Producer(f"pg-{name}", app.namesrv, send_timeout_s=3) as p:
            for i in itertools.count():
                if done.is_set():
                    return
                key = f"{name}-{i}"
                try:
                    if (await p.send(Message("Chaos", f"body-{key}".encode(), keys=[key]))).status == "SEND_OK":
                        acked.append(key)
                except Exception:            # (a try's outcome may be unknown: only acknowledged sends count)
                    await asyncio.sleep(0.05)

    async def run() -> None:
        producers = [asyncio.create_task(produce(f"p{n}")) for n in range(3)]
        order = ["reader-0", "reader-1", "haproxy", "writer", "dispatcher", "flusher"] * 2
        rng.shuffle(order)
        for role in order:
            await asyncio.sleep(rng.uniform(0.4, 1.2))
            deadline = time.monotonic() + 10          # a role killed just before may still be restarting
            while time.monotonic() < deadline:        # (its supervisor backs off; a loaded box starts it slowly)
                with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):
                    os.kill(app.role_pid(role), signal.SIGKILL)
                    kills.append(role)
                    break
                await asyncio.sleep(0.1)
        await asyncio.sleep(5)               # the last restarts, and sends still in their retries
        done.set()
        await asyncio.gather(*producers)

    asyncio.run(run())
    assert app.stop() == 0
    assert len(kills) >= 10 and len(set(kills)) >= 5, kills
    stored = stored_keys(app.cfg)            # (checks the store clean first)
    assert len(acked) > 1000 and all(stored[k] >= 1 for k in acked), [k for k in acked if not stored[k]][:5]
    tries = collections.defaultdict(set)     # a key stored twice: each copy born of its own try
    twice = {k for k, n in stored.items() if n > 1}
    for _phys, r in scan_commitlog(app.cfg):
        key = r.body.decode().split("body-")[1]
        if key in twice:
            tries[key].add(r.born_ts)
    assert all(len(tries[k]) == stored[k] for k in twice), {k: (stored[k], tries[k]) for k in twice}


def test_an_index_deleted_after_a_clean_stop_is_rebuilt_and_a_corrupt_config_says_it_fell_back(appliance_factory):
    app = appliance_factory()
    acked = _fill(app, 300)
    assert check(app.cfg).clean
    shutil.rmtree(app.cfg.index_dir)
    offsets = os.path.join(app.cfg.config_dir, "consumerOffset.json")
    with open(offsets + ".bak", "w") as f:                                # as a save before the last leaves it
        f.write('{"offsetTable": {"TBW102@g": {0: 5}}}')
    with open(offsets, "w") as f:
        f.write('{"offsetTable": {"TBW102@g": {0: 7')                   # cut short
    assert not os.path.exists(os.path.join(app.cfg.root, "abort"))        # a clean stop
    app.start()
    assert app.stop() == 0
    log = app.log_text()
    assert "is missing: rebuilding the index from the whole CommitLog" in log, log[-2000:]
    assert f"read {offsets}.bak instead" in log and "consumerOffset.json:" in log, log[-2000:]
    rep = check(app.cfg)
    assert rep.clean, rep.problems[:5]                                  # every key found through the index again
    assert sum(stored_keys(app.cfg).values()) == len(acked) == 300
    with open(offsets + ".bak", "w") as f:                                # both unreadable: start says so, exit 2
        f.write("{")
    with open(offsets, "w") as f:
        f.write("{")
    p = subprocess.run([sys.executable, "-m", "rocketbox.appliance", "start", "-c", app.conf], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "appliance: recovery cannot read the store: cannot read config file" in p.stderr, \
        p.stderr[-2000:]
    assert "Traceback" not in p.stderr


def test_after_a_kill_recovery_starts_at_the_checkpoint_not_at_the_start_of_the_log(appliance_factory):
    """The checkpoint's safe offset (all before it on disk, consume queues and index too) is where
    an abnormal restart scans and re-dispatches from: it costs what came after, not the store."""
    import re
    app = appliance_factory().start()
    ack = os.path.join(app.dir, "acks")
    p = start_producer(app, "c", "TBW102", 3000, 4, ack, batch=50)
    assert p.wait(60) == 0, p.stderr.read()
    time.sleep(2.5)                                      # a checkpoint covers it all
    tail = start_producer(app, "t", "TBW102", 100000, 4, os.path.join(app.dir, "acks2"), batch=5)
    wait_acks(os.path.join(app.dir, "acks2"), 200)
    app.kill9()
    tail.kill()
    tail.wait()
    app.start()
    assert app.stop() == 0
    rec = re.findall(r"recovered \(abnormal exit\): CommitLog end (\d+).* re-dispatched from (\d+)", app.log_text())
    end, start = map(int, rec[-1])
    assert start > 3000 * 200, (start, end)               # past the 3,000 checkpointed messages (~220 B each)
    acked = read_acks(ack) + read_acks(os.path.join(app.dir, "acks2"))
    stored = stored_keys(app.cfg)                         # (clean: every key still found through the index)
    assert all(stored[k] == 1 for k in acked)


def test_topics_acknowledged_just_before_a_kill9_are_there_after_the_restart(appliance_factory):
    """A topic creation is durable once its line is in topics.json's journal: created, answered,
    and the appliance killed within the second before topics.json is rewritten; the restart folds
    the journal in, and the topics take messages and serve routes (GET_ALL_TOPIC_CONFIG)."""
    import json

    from rocketbox.remoting.codes import RequestCode as R
    from rocketbox.remoting.codes import ResponseCode as RC
    from rocketbox.store import configfile, topicjournal
    from tests.integration.harness import create_topic
    from tests.integration.test_readers import pull_n, send_v2
    from tests.integration.wire import Wire
    app = appliance_factory().start()
    names = [f"Sudden{i}" for i in range(20)]
    for name in names:
        create_topic(app, name, 2)
    journal = topicjournal.changes(app.cfg.config_dir)
    file_had = set(configfile.read(os.path.join(app.cfg.config_dir, "topics.json"))["topicConfigTable"])
    app.kill9()
    assert {tc["topicName"] for _v, tc in journal} | file_had >= set(names)
    app.start()
    table = configfile.read(os.path.join(app.cfg.config_dir, "topics.json"))["topicConfigTable"]
    assert set(names) <= set(table) and os.path.getsize(topicjournal.path_of(app.cfg.config_dir)) == 0
    w = Wire("127.0.0.1", app.cfg.listenPort)
    assert set(names) <= set(json.loads(w.call(R.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"])
    assert send_v2(w, "Sudden19", b"after", queue=1).code == RC.SUCCESS
    assert pull_n(w, "Sudden19", 1, queue=1) == [b"after"]
    w.close()
