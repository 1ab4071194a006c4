"""Consumer-group membership across readers (readers/members.py), two readers' rows in one real
shared segment: a change on one reader wakes the other at once, which then sees the new members."""
from rocketbox.readers.members import ConsumerData, Members
from rocketbox.shm.ringclient import RingClient
from rocketbox.shm.state import SharedState
from tests.unit.writer.rig import small_config

G1 = ConsumerData({"groupName": "g1"})
WHO = {"clientAddr": "10.0.0.2:5000", "clientId": "c2", "language": "JAVA", "version": 399}


def test_a_members_change_on_one_reader_wakes_the_others_at_once(tmp_path):
    cfg = small_config(tmp_path / "store", "m")
    sh = SharedState(cfg.geometry()).create()
    try:
        r0, r1 = RingClient(cfg, sh).open(), RingClient(cfg, sh).open()     # two readers' slots, claimed
        m0, m1 = Members(sh, r0.slot), Members(sh, r1.slot)
        r0.waker.wait(0), r1.waker.wait(0)                  # (each one's start woke the other: drained)
        m0.others_moved()                                   # (both starts: seen)
        assert not m0.others_moved()
        conn = object()
        assert m1.heartbeat(conn, "c2", G1, now_ms=10**13, who=WHO)
        assert r0.waker.wait(0) and not r1.waker.wait(0)    # reader 0 posted, reader 1 not by itself
        assert m0.others_moved() and not m0.others_moved()
        assert m0.group_members("g1", now_ms=10**13) == ["c2"]
        assert not m1.heartbeat(conn, "c2", G1, now_ms=10**13 + 1, who=WHO)   # a repeat: no change, no post
        assert not r0.waker.wait(0) and not m0.others_moved()
        assert m1.remove("g1", "c2")
        assert r0.waker.wait(0) and m0.others_moved() and m0.group_members("g1", now_ms=10**13) == []
        m0.close(), m1.close(), r0.close(), r1.close()
    finally:
        sh.close()
        sh.unlink()


def _group(version: int, topics=("T",)) -> ConsumerData:
    return ConsumerData({"groupName": "g", "subscriptionDataSet": [
        {"topic": t, "subString": "*", "subVersion": version} for t in topics]})


def test_members_of_a_group_with_other_subscription_versions_keep_the_newest(tmp_path):
    """Two members of one group heartbeat with their own subVersions: the newest stays, whichever
    comes last (4.9.8's updateSubscription), else a pull carrying it is refused for ever."""
    cfg = small_config(tmp_path / "store", "v")
    sh = SharedState(cfg.geometry()).create()
    try:
        r = RingClient(cfg, sh).open()
        m = Members(sh, r.slot)
        a, b = object(), object()
        m.heartbeat(a, "a", _group(200), now_ms=10**13, who=WHO)
        m.heartbeat(b, "b", _group(100), now_ms=10**13, who=WHO)            # older: kept out
        assert m.subscription("g", "T").sub_version == 200
        m.heartbeat(b, "b", _group(300, ("T", "U")), now_ms=10**13, who=WHO)  # newer: in, and a new topic
        assert m.subscription("g", "T").sub_version == 300 and m.subscription("g", "U").sub_version == 300
        m.close(), r.close()
    finally:
        sh.close()
        sh.unlink()
