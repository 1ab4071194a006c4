"""What readers publish of their clients (shm/roster.py, readers/roster.py): a reader reads only what a live
reader of a slot published, whole, and merges a group's members from every reader."""
import os

from rocketbox.readers import roster
from rocketbox.shm.roster import Roster

JAVA = {"clientAddr": "10.0.0.1:5000", "clientId": "10.0.0.1@a", "language": "JAVA", "version": 399}
CPP = {"clientAddr": "10.0.0.2:5001", "clientId": "10.0.0.2@b", "language": "CPP", "version": 5}


def _doc(pid, consumers=None, producers=None):
    return {"pid": pid, "consumers": consumers or {}, "producers": producers or {}}


def test_only_a_live_readers_whole_file_is_read(tmp_path):
    d = str(tmp_path / "roster")
    mine, other, stale = Roster(d, 0), Roster(d, 1), Roster(d, 2)
    other.publish(_doc(111, producers={"pg": [CPP]}))
    stale.publish(_doc(222))                                  # slot 2's owner is now pid 333: stale
    assert mine.others({0: os.getpid(), 1: 111, 2: 333}) == [_doc(111, producers={"pg": [CPP]})]
    with open(other.path, "wb") as f:                         # a torn file (it never is: renamed in whole)
        f.write(b'{"pid": 111, "consu')
    assert mine.others({1: 111}) == []
    other.close()
    assert mine.others({1: 111}) == [] and not os.path.exists(other.path)


def test_a_groups_members_come_from_every_reader_and_only_live_ones_count():
    sub = {"subString": "*", "topic": "T"}
    docs = [_doc(1, {"g": {"consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                           "subscriptionTable": {"T": sub}, "connectionSet": [JAVA]}}),
            _doc(2, {"g": {"consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                           "subscriptionTable": {"U": sub}, "connectionSet": [CPP, JAVA]}})]
    got = roster.consumer_connection("g", docs, ["10.0.0.1@a", "10.0.0.2@b"])
    assert got == {"connectionSet": [JAVA, CPP], "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                   "subscriptionTable": {"T": sub, "U": sub}}
    # only members the shared rows say are live; one not published yet is listed by its id
    got = roster.consumer_connection("g", docs, ["10.0.0.2@b", "10.0.0.3@c"])
    assert got["connectionSet"] == [CPP, {"clientAddr": "", "clientId": "10.0.0.3@c", "language": "OTHER",
                                          "version": 0}]
    assert roster.consumer_connection("g", docs, []) is None
    assert roster.groups_subscribed("U", docs) == {"g"} and roster.groups_subscribed("V", docs) == set()
    assert roster.producer_connection("pg", [_doc(1, producers={"pg": [CPP]}), _doc(2, producers={"pg": [CPP]})]) \
        == {"connectionSet": [CPP]}
    assert roster.producer_connection("pg", docs) is None
