"""Timers (store/timer.py, scheduler/timers.py): the send path's rules, the pending set, and the
scheduler against an in-process writer and dispatcher: a timer is delivered at its time, not
before, once; a cancelled one never; the checkpoint rebuilds what is pending, without the ones
delivered, and a timer whose copy gets old is rolled."""
import os
import time

import numpy as np
import pytest

from rocketbox.appliance.inprocess import running_store, small_config
from rocketbox.scheduler.service import SchedulerService
from rocketbox.scheduler.timers import PendingTimers
from rocketbox.shm.ringclient import PutRequest
from rocketbox.store import configfile, message, timer
from rocketbox.writer.topics import topic_config
from tests.unit.scheduler.test_scheduler import _real, _writer_thread


def test_timer_properties_follow_5x_precedence_and_bounds():
    now, cap = 1_000_000, 3_600_000
    assert timer.deliver_ms(b"TIMER_DELAY_SEC\x012\x02TIMER_DELAY_MS\x01700\x02TIMER_DELIVER_MS\x019", now, cap) == now + 2000
    assert timer.deliver_ms(b"TIMER_DELAY_MS\x01700\x02TIMER_DELIVER_MS\x019", now, cap) == now + 700
    assert timer.deliver_ms(b"TIMER_DELIVER_MS\x019", now, cap) == 9            # in the past: the caller delivers now
    assert timer.deliver_ms(b"TAGS\x01a", now, cap) is None
    with pytest.raises(ValueError, match="max delay 3600000ms"):
        timer.deliver_ms(b"TIMER_DELAY_SEC\x013601", now, cap)
    with pytest.raises(ValueError, match="timer message illegal"):
        timer.deliver_ms(b"TIMER_DELAY_MS\x01soon", now, cap)
    assert timer.without_timer(b"TAGS\x01a\x02TIMER_DELAY_SEC\x015\x02DELAY\x012") == b"TAGS\x01a\x02DELAY\x012"
    props = timer.timer_properties(b"TAGS\x01a", 77, "T", 3)
    assert message.parse_properties(props.decode()) == {"TAGS": "a", "TIMER_OUT_MS": "77", "REAL_TOPIC": "T", "REAL_QID": "3"}
    assert timer.tag_code(props, 5) == 77
    assert timer.tag_code(timer.marker_properties("T", "ID", 77, 4096), 5) == -4097
    assert timer.rolled(timer.rolled(props)).endswith(b"TIMER_ROLL_TIMES\x012")


def test_pending_timers_come_due_in_time_order_and_cancelled_ones_never():
    p = PendingTimers()
    rng = np.random.default_rng(7)
    when = rng.integers(1000, 2000, 100_000)
    phys = np.arange(100_000) * 100
    p.add(when, phys, np.full(100_000, 90))
    assert len(p) == 100_000 and p.next_due() == when.min()
    assert p.cancel(int(phys[np.argmin(when)])) and not p.cancel(12345)
    got = []
    while True:
        e, end = p.due(1500, 256)
        if end == p.head:
            break
        got += e["tags"].tolist()
        p.done(len(e), end)
    expected = np.sort(when[when <= 1500])[1:]                   # all due, the cancelled one left out
    assert got == expected.tolist() and len(p) == 100_000 - 1 - len(expected)
    p.add(np.array([1100]), np.array([7]), np.array([90]))        # late but due: next
    assert p.next_due() == 1100 and p.due(1500, 10)[0]["phys"].tolist() == [7]
    assert p.nbytes <= 100_000 * 20 * 1.1


def _timer(c, when: int, body: bytes, topic="Real", qid=1, uniq=None):
    props = timer.timer_properties(b"UNIQ_KEY\x01" + (uniq or body.decode().upper()).encode(), when, topic, qid)
    (r,) = c.put([PutRequest(timer.TIMER_TOPIC, 0, [body], [message.parse_properties(props.decode())], born_ts=1234)])
    assert r.ok
    return r


def _cancel(c, r, when: int):
    rec = timer.marker_record("Real", "ID", when, r.phys_offsets[0], 0, b"\0\0\0\0", 0)
    h, _body, _t, props = next(message.record_fields(rec, "marker"))
    (m,) = c.put([PutRequest(timer.TIMER_TOPIC, 0, [b""], [message.parse_properties(props.decode())])])
    assert m.ok


def test_timers_are_delivered_when_due_cancelled_ones_never_and_a_restart_resumes(tmp_path):
    cfg = small_config(tmp_path / "store", "tmr")
    with running_store(cfg) as (sh, w, d, c):
        w.topics.upsert(topic_config("Real", 4, 4))
        s = SchedulerService(cfg, sh).open()
        now = int(time.time() * 1000)
        try:
            with _writer_thread(w, d):
                a = _timer(c, now + 1500, b"a")
                _timer(c, now + 1400, b"b")
                dropped = _timer(c, now + 1450, b"cancelled")
                _timer(c, now + 3_600_000, b"hour")
                _cancel(c, dropped, now + 1450)
                time.sleep(0.1)
                due_in = s.step()
                assert 0 < due_in <= 1.3 and _real(sh, cfg) == []            # not before their time
                time.sleep(max(0.0, (now + 1550) / 1000 - time.time()))
                s.step()
                time.sleep(0.1)
            got = _real(sh, cfg)
            assert [r.body for r in got] == [b"b", b"a"]                     # in time order, the cancelled one not
            assert all(r.store_ts >= int(r.properties["TIMER_OUT_MS"]) for r in got)
            assert got[1].properties["REAL_TOPIC"] == "Real" and got[1].born_ts == 1234 and a.ok
            assert len(s.timers.pending) == 1
        finally:
            s.close()
        cp = configfile.read(os.path.join(cfg.config_dir, "timerCheckpoint.json"))
        assert cp["pending"] == 1 and cp["scannedOffset"] == 5 and cp["nextDueMs"] == now + 3_600_000
        again = SchedulerService(cfg, sh).open()                             # a restart delivers none twice
        try:
            assert len(again.timers.pending) == 1
            with _writer_thread(w, d):
                again.step()
                time.sleep(0.1)
            assert [r.body for r in _real(sh, cfg)] == [b"b", b"a"]
        finally:
            again.close()
        for name in ("timerCheckpoint.json", "timerCheckpoint.json.bak"):   # lost: all read again from 0
            os.unlink(os.path.join(cfg.config_dir, name))
        third = SchedulerService(cfg, sh).open()
        try:
            assert len(third.timers.pending) == 3                           # delivered again (at least once), not the cancelled
        finally:
            third.close()


def test_a_timer_whose_copy_gets_old_is_stored_again_and_its_old_copy_cancelled(tmp_path):
    cfg = small_config(tmp_path / "store", "tmr2")
    with running_store(cfg) as (sh, w, d, c):
        w.topics.upsert(topic_config("Real", 4, 4))
        s = SchedulerService(cfg, sh).open()
        now = int(time.time() * 1000)
        try:
            with _writer_thread(w, d):
                old = _timer(c, now + 3_600_000, b"far")
                time.sleep(0.1)
                s.step()
                s.timers.roll_line = lambda: old.phys_offsets[0] + 1     # its file is old (retention's clock, shortened)
                s.roll_at = 0
                s.step()
                time.sleep(0.1)
                s.step()
            (entry,) = s.timers.pending.below(1 << 62, 10)
            assert entry["phys"] > old.phys_offsets[0] and entry["tags"] == now + 3_600_000 and len(s.timers.pending) == 1
            rec = message.decode_record(bytes(s.view.record(int(entry["phys"]), int(entry["size"]))))
            assert rec.body == b"far" and rec.properties["TIMER_ROLL_TIMES"] == "1"
        finally:
            s.close()
        again = SchedulerService(cfg, sh).open()                     # the old copy stays cancelled
        try:
            assert len(again.timers.pending) == 1
        finally:
            again.close()


def test_merges_keep_time_order_across_batches_and_drop_what_was_cancelled():
    p = PendingTimers()
    rng = np.random.default_rng(3)
    everything = {}
    for batch in range(12):                                  # some merges by size, some fresh left over
        when = rng.integers(0, 1_000_000, 30_000)
        phys = batch * 1_000_000 + np.arange(30_000)
        p.add(when, phys, np.full(30_000, 50))
        everything.update(zip(phys.tolist(), when.tolist()))
    gone = [5, 1_000_007, 11_000_003]                        # in sorted runs and in the fresh ones
    assert all(p.cancel(g) for g in gone) and not p.cancel(gone[0])
    assert p.min_phys() == 0
    e, end = p.due(1_000_000, 10**9)
    assert len(e) == len(everything) - 3 == len(p)
    assert np.all(np.diff(e["tags"]) >= 0) and not set(gone) & set(e["phys"].tolist())
    assert all(everything[ph] == w for ph, w in zip(e["phys"][::997].tolist(), e["tags"][::997].tolist()))
    p.done(len(e), end)
    assert len(p) == 0 and p.next_due() is None and p.min_phys() is None
