"""The SimpleConsumer's state (grpcfront/leases.py): acks move the committed offset over what joins
it, receipt handles parse back, and the journal -- replayed, compacted, with a line it cannot read
-- gives back the same state."""
from __future__ import annotations

import random

import pytest

from rocketbox.grpcfront import leases
from rocketbox.grpcfront.leases import Journal, Lease, QueueState


def test_acks_move_the_committed_offset_over_what_joins_it():
    st = QueueState(10)
    for o in range(10, 15):
        st.leases[o] = Lease(1, 1000, o)
    st.next = 15
    assert not st.ack(12) and st.committed == 10 and st.acked == {12}
    assert st.ack(10) and st.committed == 11
    assert st.ack(11) and st.committed == 13 and st.acked == set()
    assert st.acked_already(12) and not st.acked_already(13)
    assert st.due(999) == [] and st.due(1000) == [13, 14] and st.busy(999) and not st.busy(1000)
    st.jump(20)                                       # (retention took the rest)
    assert (st.committed, st.next, st.leases, st.acked) == (20, 20, {}, set())


def test_receipt_handles_parse_back_and_others_are_refused():
    h = leases.handle(3, 12345, 0xABCDEF)
    assert leases.parse(h) == (3, 12345, 0xABCDEF)
    for bad in ("", "x", "rbx1.1.2", "rbx2.1.2.3", "rbx1.-1.2.3", "rbx1.a.2.3", "rbx1.1.2.zz"):
        with pytest.raises(ValueError):
            leases.parse(bad)


def _same(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for k in a:
        assert (a[k].committed, a[k].leases, a[k].acked) == (b[k].committed, b[k].leases, b[k].acked), k


def test_the_journal_replays_and_compacts_to_the_same_state(tmp_path):
    rng = random.Random(55)
    path = str(tmp_path / "grpc" / "leases.journal")
    j = Journal(path)
    j.open()
    states: dict = {}
    for key, qid in ((b"T@g", 0), (b"T@g", 1), (b"U@h", 0)):
        st = states[(key, qid)] = QueueState(rng.randrange(0, 5))
        j.committed(key, qid, st.committed)
        for _ in range(300):
            if st.leases and rng.random() < 0.5:
                o = rng.choice(sorted(st.leases))
                j.acked(key, qid, o)
                st.ack(o)
            else:
                o = st.next
                lease = st.leases[o] = Lease(rng.randrange(1, 4), rng.randrange(10**12, 2 * 10**12), leases.new_nonce())
                st.next = o + 1
                j.leased(key, qid, o, lease)
        j.write()
    _same(Journal(path).replay(), states)
    j.compact(states)
    _same(Journal(path).replay(), states)
    j.close()


def test_a_line_the_journal_cannot_read_is_stepped_over(tmp_path, caplog):
    path = tmp_path / "leases.journal"
    path.write_text("C T@g 0 5\nA T@g 0 5\ngarbage here\nL T@g 0 6 1 99 7\nA U@h 0 1\nA T@g 0 7\n")
    states = Journal(str(path)).replay()
    st = states[(b"T@g", 0)]
    assert (st.committed, sorted(st.leases), st.acked) == (6, [6], {7})
    assert (b"U@h", 0) not in states                          # an ack of a queue never started
    assert "stepped over" in caplog.text


def test_lines_written_twice_replay_the_same(tmp_path):
    """A write that failed part-way is written again whole: its lines twice give the same state."""
    lines = "C T@g 0 0\nL T@g 0 0 1 99 7\nL T@g 0 1 1 99 8\nA T@g 0 0\nL T@g 0 1 2 150 9\n"
    once, twice = tmp_path / "once", tmp_path / "twice"
    once.write_text(lines)
    twice.write_text(lines + lines)
    _same(Journal(str(once)).replay(), Journal(str(twice)).replay())
    st = Journal(str(twice)).replay()[(b"T@g", 0)]
    assert (st.committed, st.leases) == (1, {1: Lease(2, 150, 9)})
