"""Damage inside the CommitLog costs the damaged records only: recovery writes a tombstone over
each damaged span, keeps and dispatches everything after it, quarantines the original bytes, and
consumers move past it; ``appliance check`` names every bad record of a stopped store."""
from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time

from rocketbox.appliance.check import check, scan_commitlog
from rocketbox.store import quarantine, salvage
from rocketbox.store.mappedfile import offset_to_name
from tests.integration.harness import ROOT, read_acks, read_topic, start_producer, stored_keys

FILE = 256 * 1024           # CommitLog files of ~1,000 records


def _filled(appliance_factory, n: int = 4000):
    """An appliance whose store holds ``n`` acknowledged messages (~220 bytes each), stopped
    gracefully; -> (app, acked keys, [(phys, record)])."""
    app = appliance_factory(mappedFileSizeCommitLog=FILE, namesrv=True)
    app.start()
    ack = os.path.join(app.dir, "acks")
    p = start_producer(app, "d", "TBW102", n, 4, ack, batch=50)
    assert p.wait(120) == 0, p.stderr.read()
    assert app.stop() == 0
    records = list(scan_commitlog(app.cfg))
    return app, read_acks(ack), records


def _write(app, phys: int, data: bytes) -> None:
    path = os.path.join(app.cfg.commitlog_dir, offset_to_name(phys - phys % FILE))
    with open(path, "r+b") as f:
        f.seek(phys % FILE)
        f.write(data)


def _flip(app, phys: int) -> None:
    path = os.path.join(app.cfg.commitlog_dir, offset_to_name(phys - phys % FILE))
    with open(path, "r+b") as f:
        f.seek(phys % FILE)
        b = f.read(1)
        f.seek(phys % FILE)
        f.write(bytes([b[0] ^ 0x40]))


def _crashed(app) -> None:
    """As after a kill -9 shortly after start: the abort marker, and a checkpoint older than the
    log (the abnormal scan then starts at the first file)."""
    open(os.path.join(app.cfg.root, "abort"), "wb").close()
    with open(os.path.join(app.cfg.root, "checkpoint"), "r+b") as f:
        f.write(bytes(40))


def _key(r) -> str:
    return r.body.decode().split("body-")[1]


def test_damage_inside_the_log_costs_only_the_damaged_records(appliance_factory):
    app, acked, records = _filled(appliance_factory)
    assert records[-1][0] >= 3 * FILE, "the store should span at least 4 files"
    by_file = {}
    for i, (phys, r) in enumerate(records):
        by_file.setdefault(phys // FILE, []).append(i)
    body = records[by_file[0][500]]                       # a body byte, in the first file
    size = records[by_file[1][300]]                       # a TOTALSIZE byte, in the second
    pair = records[by_file[1][600]], records[by_file[1][601]]      # two records zeroed (a lost sector run)
    last = records[by_file[2][-1]]                        # the third file's last record and its filler
    _flip(app, body[0] + 100)                            # (the body starts 88 bytes in)
    _flip(app, size[0] + 1)
    _write(app, pair[0][0], bytes(pair[0][1].total_size + pair[1][1].total_size))
    _write(app, last[0], bytes(FILE - last[0] % FILE))
    lost = {_key(r) for _p, r in (body, size, *pair, last)}
    bad = [p for p in check(app.cfg).problems if p.startswith("bad record at offset ")]
    assert len(bad) == 4, bad                            # (and the queue offsets they hold are missing)
    for p, (phys, _r), what in zip(bad, (body, size, pair[0], last), ("body CRC mismatch", "record size",
                                                                     "bad magic", "bad magic")):
        assert p.startswith(f"bad record at offset {phys} ") and what in p, (phys, p)
    _crashed(app)

    app.start()
    log = app.log_text()
    assert log.count("replaced by a tombstone") == 4, log[-3000:]
    assert "torn or corrupt data" not in log          # nothing cut
    got = asyncio.run(read_topic(app, "TBW102"))            # consumers move past every tombstone
    assert app.stop() == 0
    assert sorted(_key(m) for m in got) == sorted(k for k in acked if k not in lost)

    stored = stored_keys(app.cfg)                        # (the store checks clean)
    assert set(stored) == set(acked) - lost and set(stored.values()) == {1}
    rep = check(app.cfg)
    assert [(t[0], t[1]) for t in rep.tombstones] == [
        (body[0], body[1].total_size), (size[0], size[1].total_size),
        (pair[0][0], pair[0][1].total_size + pair[1][1].total_size), (last[0], FILE - last[0] % FILE)]
    assert [(t[2], t[3], t[4]) for t in rep.tombstones[:2]] == [
        ("TBW102", body[1].queue_id, body[1].queue_offset), ("TBW102", size[1].queue_id, size[1].queue_offset)]
    q = quarantine.load(app.cfg.root)
    assert [e["offset"] for e in q] == [t[0] for t in rep.tombstones]
    assert [e["identity"] for e in q] == ["consume queue"] * 4     # each was dispatched before the damage
    with open(q[0]["bytes"], "rb") as f:
        original = f.read()
    assert len(original) == body[1].total_size
    assert original[:100] == _record_bytes(body[1])[:100] and original[100] != _record_bytes(body[1])[100]

    shown = app.cmd("quarantine")
    assert shown.returncode == 0 and shown.stdout.splitlines()[-1] == "4 damaged spans quarantined", shown.stdout
    assert f"offset {body[0]} " in shown.stdout and f"TBW102 queue {body[1].queue_id} offset {body[1].queue_offset}" \
        in shown.stdout
    app.start()                                          # a second start finds nothing more to do
    assert app.stop() == 0
    assert len(quarantine.load(app.cfg.root)) == 4 and check(app.cfg).clean


def _record_bytes(r) -> bytes:
    from rocketbox.store import message
    return message.encode_record(
        topic=r.topic.encode(), queue_id=r.queue_id, body=r.body, properties=message.encode_properties(r.properties).encode(),
        flag=r.flag, sys_flag=r.sys_flag, born_ts=r.born_ts, born_ip=r.born_ip, born_port=r.born_port,
        store_ip=r.store_ip, store_port=r.store_port, reconsume_times=r.reconsume_times,
        prepared_offset=r.prepared_offset, queue_offset=r.queue_offset, phys_offset=r.phys_offset, store_ts=r.store_ts)


def test_a_record_whose_queue_nothing_names_leaves_a_gap_that_points_at_its_tombstone(appliance_factory):
    """Its header zeroed and its consume queues gone (so no entry names it either): its queue's
    offset is filled with an entry pointing at the tombstone, which readers skip."""
    app, acked, records = _filled(appliance_factory)
    phys, r = records[len(records) // 2]
    _write(app, phys, bytes(60))
    shutil.rmtree(os.path.join(app.cfg.root, "consumequeue"))
    _crashed(app)
    app.start()
    got = asyncio.run(read_topic(app, "TBW102"))
    assert app.stop() == 0
    assert "lost in the damaged span" in app.log_text()
    assert sorted(_key(m) for m in got) == sorted(k for k in acked if k != _key(r))
    rep = check(app.cfg)
    assert rep.clean, rep.problems[:5]
    assert [(t[0], t[2], t[4]) for t in rep.tombstones] == [(phys, salvage.DAMAGED_TOPIC.decode(), None)]
    assert quarantine.load(app.cfg.root)[0]["identity"] == "unknown"
    offs = sorted(q for q, _p, _b in rep.queues[("TBW102", r.queue_id)])
    assert r.queue_offset not in offs and offs == [q for q in range(len(offs) + 1) if q != r.queue_offset]


def test_check_names_what_is_wrong_and_exits_non_zero(appliance_factory, tmp_path):
    app, _acked, records = _filled(appliance_factory, 2000)
    run = lambda: subprocess.run([sys.executable, "-m", "rocketbox.appliance", "check", "-c", app.conf], cwd=ROOT,  # noqa: E731
                                 capture_output=True, text=True, timeout=120)
    ok = run()
    assert (ok.returncode, ok.stdout.splitlines()[-1]) == (0, "clean"), ok.stdout
    phys, r = records[700]
    _flip(app, phys + 100)
    shutil.rmtree(app.cfg.index_dir)
    newest = sorted(os.listdir(app.cfg.commitlog_dir))[-1]
    with open(os.path.join(app.cfg.commitlog_dir, newest), "r+b") as f:
        f.truncate(FILE // 2)
    bad = run()
    assert bad.returncode == 1, bad.stdout
    out = bad.stdout
    assert f"PROBLEM bad record at offset {phys} " in out and "body CRC mismatch" in out
    assert f"is {FILE // 2} bytes, not {FILE}" in out and "holds no IndexFile" in out
    empty = tmp_path / "empty.conf"
    empty.write_text(f"storePathRootDir={tmp_path / 'nothing'}\n")
    for what in ("check", "scrub"):
        none = subprocess.run([sys.executable, "-m", "rocketbox.appliance", what, "-c", str(empty)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert none.returncode == 2 and "no store at" in none.stdout, none.stdout + none.stderr


def test_a_pull_never_hands_out_a_record_whose_body_does_not_match_its_crc(appliance_factory):
    """Damage a record written before this start, in the running store (no recovery sees it):
    pulls leave the record out, say so once per reader, quarantine it, and the queue moves past it."""
    app, acked, records = _filled(appliance_factory, 1000)
    app.start()
    phys, r = records[400]
    _flip(app, phys + 100)
    got = asyncio.run(read_topic(app, "TBW102"))
    again = asyncio.run(read_topic(app, "TBW102"))       # (reported once, skipped every time)
    assert app.stop() == 0
    assert sorted(_key(m) for m in got) == sorted(_key(m) for m in again) == sorted(k for k in acked if k != _key(r))
    log = app.log_text()
    assert f"the record at offset {phys} (TBW102 queue {r.queue_id} offset {r.queue_offset}" in log
    assert log.count(f"the record at offset {phys} ") <= 2                        # once per reader at most
    q = quarantine.load(app.cfg.root)
    assert [(e["offset"], e["reason"][:25], e["foundBy"].startswith("reader-slot")) for e in q] == \
        [(phys, "body CRC mismatch: stored", True)]
    with open(q[0]["bytes"], "rb") as f:
        assert len(f.read()) == r.total_size
    out = app.cmd("check")              # one outcome (#49): the stop made it recovery's tombstone
    assert out.returncode == 0 and f"QUARANTINED {r.total_size} bytes at offset {phys}" in out.stdout, out.stdout


def test_with_verify_all_a_record_written_since_start_is_checked_too(appliance_factory):
    app = appliance_factory(verifyBodyCrcOnRead="all", namesrv=True).start()
    ack = os.path.join(app.dir, "acks")
    p = start_producer(app, "v", "TBW102", 300, 2, ack, batch=20)
    assert p.wait(60) == 0, p.stderr.read()
    records = list(scan_commitlog(app.cfg))
    phys, r = records[123]
    _flip(app, phys + 100)
    got = asyncio.run(read_topic(app, "TBW102"))
    assert app.stop() == 0
    assert sorted(_key(m) for m in got) == sorted(k for k in read_acks(ack) if k != _key(r))
    assert [e["offset"] for e in quarantine.load(app.cfg.root)] == [phys]


def test_the_scrub_finds_damage_before_any_consumer_does(appliance_factory):
    """``appliance scrub`` on a stopped store, and the cleaner's background pass on a running one."""
    app, _acked, records = _filled(appliance_factory, 1500)
    clean = app.cmd("scrub")
    assert clean.returncode == 0 and "0 damaged records" in clean.stdout, clean.stdout + clean.stderr
    phys, _r = records[300]
    _flip(app, phys + 100)
    found = app.cmd("scrub")
    assert found.returncode == 1 and "1 damaged records" in found.stdout, found.stdout + found.stderr
    assert f"damaged record at offset {phys} " in found.stderr and "body CRC mismatch" in found.stderr
    assert [(e["offset"], e["foundBy"]) for e in quarantine.load(app.cfg.root)] == [(phys, "scrub")]
    _flip(app, phys + 100)                                # mended; damage another while it runs
    phys, _r = records[900]
    with open(app.conf, "a") as f:
        f.write("scrubIntervalHours=0\n")              # passes one after the other, from the start
    app.start()
    _flip(app, phys + 100)
    deadline = time.monotonic() + 15
    while f"scrub: damaged record at offset {phys} " not in app.log_text():
        assert time.monotonic() < deadline, app.log_text()[-2000:]
        time.sleep(0.2)
    assert app.stop() == 0
    assert (phys, "cleaner") in [(e["offset"], e["foundBy"]) for e in quarantine.load(app.cfg.root)]


def _killed(appliance_factory, n: int = 6000, wait_checkpoint: bool = False, **overrides):
    """``n`` acknowledged sends to 4 queues, then kill -9 of everything (no clean stop); with
    ``wait_checkpoint``, once the flusher has checkpointed them (recovery then scans from there)."""
    app = appliance_factory(mappedFileSizeCommitLog=FILE, namesrv=True, **overrides)
    app.start()
    ack = os.path.join(app.dir, "acks")
    p = start_producer(app, "k", "TBW102", n, 4, ack, batch=50)
    assert p.wait(120) == 0, p.stderr.read()
    if wait_checkpoint:
        from rocketbox.store.checkpoint import Checkpoint
        deadline = time.monotonic() + 15
        while Checkpoint(os.path.join(app.cfg.root, "checkpoint")).load().safe_offset < 3 * FILE:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    app.kill9()
    return app, read_acks(ack)


def test_a_deleted_or_broken_queue_is_rebuilt_from_the_commitlog(appliance_factory):
    """#49: after a kill -9, queue 1's directory removed (the other queues' entries keep the
    re-dispatch point late), a file missing in the middle of queue 2, a short one in queue 3:
    recovery rebuilds each from the whole CommitLog and says so; the broken ones are kept aside."""
    from tests.integration.test_readers import pull
    from tests.integration.wire import Wire
    app, acked = _killed(appliance_factory, mappedFileSizeConsumeQueue=2000)      # 100 entries a file
    cq = os.path.join(app.cfg.root, "consumequeue", "TBW102")
    files2, files3 = sorted(os.listdir(f"{cq}/2")), sorted(os.listdir(f"{cq}/3"))
    assert len(files2) > 5 and len(files3) > 5
    shutil.rmtree(f"{cq}/1")
    os.unlink(f"{cq}/2/{files2[3]}")
    os.truncate(f"{cq}/3/{files3[2]}", 1000)
    app.start()
    log = app.log_text()
    assert "known queues have no consume-queue directory (TBW102/1, " in log and "rebuilding them" in log
    assert "consume queue TBW102/2 cannot be read" in log and "consume queue TBW102/3 cannot be read" in log
    w = Wire("127.0.0.1", app.cfg.listenPort)
    for q, at in ((1, 0), (1, 1), (1, 750), (2, 350), (3, 250)):
        r = pull(w, "TBW102", at, queue=q)
        assert r.code == 0 and int(r.ext["nextBeginOffset"]) > at, (q, at, r.code, r.remark)
    w.close()
    got = asyncio.run(read_topic(app, "TBW102"))
    assert app.stop() == 0
    assert sorted(_key(m) for m in got) == sorted(acked)
    assert "handler failed" not in app.log_text()
    assert check(app.cfg).clean
    aside = os.path.join(app.cfg.root, "quarantine", "consumequeue", "TBW102")
    assert sorted(n.split(".")[0] for n in os.listdir(aside)) == ["2", "3"]      # kept, not deleted


def test_a_damaged_totalsize_below_the_redispatch_point_is_left_out_quarantined_and_buried(appliance_factory):
    """#49: a flipped TOTALSIZE byte in the second file after a kill -9 (recovery re-dispatches from
    later on and does not see it): a pull leaves the record out (not an error for the whole batch),
    logs it once and quarantines it; the clean stop makes it the tombstone recovery makes, so the
    stopped store checks clean with it listed apart."""
    app, acked = _killed(appliance_factory, wait_checkpoint=True)
    from rocketbox.store.checkpoint import Checkpoint
    assert Checkpoint(os.path.join(app.cfg.root, "checkpoint")).load().safe_offset > 2 * FILE
    records = list(scan_commitlog(app.cfg))
    phys, r = next((p, r) for p, r in records if p >= FILE + FILE // 2)
    _flip(app, phys + 1)
    app.start()
    got = asyncio.run(read_topic(app, "TBW102"))
    log = app.log_text()
    assert sorted(_key(m) for m in got) == sorted(k for k in acked if k != _key(r))
    assert f"the record at offset {phys} (TBW102 queue {r.queue_id} offset {r.queue_offset}" in log
    assert "record size" in log or "TOTALSIZE" in log
    assert "handler failed" not in log and "runs past" not in log
    assert app.stop() == 0
    assert "damaged span(s) found while running replaced by tombstones" in app.log_text()
    rep = check(app.cfg)
    assert rep.clean, rep.problems[:5]
    assert [(t[0], t[2], t[3], t[4]) for t in rep.tombstones] == [(phys, "TBW102", r.queue_id, r.queue_offset)]
    q = quarantine.load(app.cfg.root)
    assert [e["offset"] for e in q] == [phys] and q[0]["foundBy"].startswith("reader-slot")
