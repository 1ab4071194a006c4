"""QUERY_MESSAGE (12) by key and by unique key, and VIEW_MESSAGE_BY_ID: on the wire (codes,
remarks, limits, time ranges, exact matches where 4.9.8 compares a hash), through our client and
``appliance query``, and with the real ``mqadmin`` 4.9.8 (``queryMsgByKey``,
``queryMsgByUniqueKey``, ``queryMsgById``)."""
from __future__ import annotations

import asyncio
import os
import subprocess

import pytest

from rocketbox.client.admin import Admin
from rocketbox.client.errors import MQBrokerError
from rocketbox.client.message import Message
from rocketbox.client.producer import Producer
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.store import indexfile, message
from rocketbox.store.javahash import index_key_hash
from tests.integration import javaclient
from tests.integration.harness import create_topic, dispatched, wait_route
from tests.integration.wire import Wire

MAX = str((1 << 63) - 1)
NOT_FOUND = "can not find message, maybe time range not correct"


def query(w: Wire, topic: str, key: str, max_num: int = 64, begin: int = 0, end: str | int = MAX, unique: bool = False):
    ext = {"topic": topic, "key": key, "maxNum": str(max_num), "beginTimestamp": str(begin), "endTimestamp": str(end)}
    if unique:
        ext["_UNIQUE_KEY_QUERY"] = "true"
    return w.call(R.QUERY_MESSAGE, ext)


def found(resp) -> list[message.Record]:
    assert resp.code == RC.SUCCESS, resp.remark
    return message.decode_records(resp.body)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One appliance whose small IndexFiles (60 entries) roll several times: ``Q`` holds keys
    ``Aa`` and ``BB`` (the same String.hashCode, so 4.9.8 answers one with the other's messages
    too), 70 messages of key ``Many``, and two groups of ``Timed`` a second and more apart."""
    from tests.integration.harness import Appliance
    app = Appliance(str(tmp_path_factory.mktemp("query")), namesrv=True, maxIndexNum=60, maxHashSlotNum=50).start()
    try:
        for topic in ("Q", "Other", "Timed"):
            create_topic(app, topic, 2)
            wait_route(app, topic)
        assert index_key_hash("Q#Aa") == index_key_hash("Q#BB")

        async def produce():
            sent: dict[str, list] = {"Aa": [], "BB": [], "Many": [], "early": [], "late": []}
            async with Producer("query-test", app.namesrv) as p:
                for i in range(5):
                    sent["Aa"].append(await p.send(Message("Q", b"aa-%d" % i, keys="Aa")))
                    sent["BB"].append(await p.send(Message("Q", b"bb-%d" % i, keys="BB")))
                for i in range(2):
                    sent["Aa"].append(await p.send(Message("Q", b"aa-more-%d" % i, keys=["x", "Aa"])))
                await p.send(Message("Other", b"other-aa", keys="Aa"))
                for i in range(70):
                    sent["Many"].append(await p.send(Message("Q", b"many-%d" % i, keys="Many")))
                for i in range(3):
                    sent["early"].append(await p.send(Message("Timed", b"early-%d" % i, keys="T")))
                await asyncio.sleep(1.2)
                for i in range(3):
                    sent["late"].append(await p.send(Message("Timed", b"late-%d" % i, keys="T")))
            await dispatched(app)
            return sent
        app.sent = asyncio.run(produce())
        yield app
    finally:
        app.cleanup()


def test_a_key_query_answers_exact_matches_newest_first_across_index_files(store):
    assert len(indexfile.list_index_files(store.cfg.index_dir)) >= 3          # the answer spans several
    w = Wire("127.0.0.1", store.cfg.listenPort)
    try:
        r = query(w, "Q", "Aa")
        recs = found(r)
        offsets = [message.parse_offset_msg_id(s.offset_msg_id)[2] for s in store.sent["Aa"]]
        assert [x.phys_offset for x in recs] == sorted(offsets, reverse=True)     # BB's never, Other's never
        assert {x.topic for x in recs} == {"Q"} and all("Aa" in x.properties["KEYS"].split() for x in recs)
        ts, phys = int(r.ext["indexLastUpdateTimestamp"]), int(r.ext["indexLastUpdatePhyoffset"])
        assert ts >= max(x.store_ts for x in recs) and phys >= max(offsets)
        assert [x.body for x in found(query(w, "Q", "BB"))] == [b"bb-%d" % i for i in reversed(range(5))]
        assert [x.body for x in found(query(w, "Other", "Aa"))] == [b"other-aa"]

        many = found(query(w, "Q", "Many", max_num=1000))                      # maxMsgsNumBatch: 64
        assert [x.body for x in many] == [b"many-%d" % i for i in reversed(range(6, 70))]
        assert [x.body for x in found(query(w, "Q", "Many", max_num=3))] == [b"many-69", b"many-68", b"many-67"]

        for miss in (query(w, "Q", "nobody"), query(w, "Nowhere", "Aa"), query(w, "Q", "Aa", begin=10, end=5),
                     query(w, "Q", "Aa", max_num=0), query(w, "Q", "Aa", end=1000)):
            assert (miss.code, miss.remark) == (RC.QUERY_NOT_FOUND, NOT_FOUND)
            assert "indexLastUpdateTimestamp" in miss.ext
    finally:
        w.close()


def test_a_time_range_keeps_what_was_indexed_within_it(store):
    w = Wire("127.0.0.1", store.cfg.listenPort)
    try:
        stored = found(query(w, "Timed", "T"))
        assert sorted(x.body for x in stored) == sorted([b"early-%d" % i for i in range(3)] + [b"late-%d" % i for i in range(3)])
        last_early = max(x.store_ts for x in stored if x.body.startswith(b"early"))
        # an entry's time is its file's begin plus whole seconds (4.9.8's timeDiff): never after the store time
        early = found(query(w, "Timed", "T", end=last_early))
        late = found(query(w, "Timed", "T", begin=last_early + 50))
        assert sorted(x.body for x in early) == [b"early-%d" % i for i in range(3)]
        assert sorted(x.body for x in late) == [b"late-%d" % i for i in range(3)]
    finally:
        w.close()


def test_a_unique_key_query_answers_that_message_alone(store):
    w = Wire("127.0.0.1", store.cfg.listenPort)
    try:
        s = store.sent["Many"][10]
        recs = found(query(w, "Q", s.msg_id, max_num=1, unique=True))
        assert [(x.body, x.properties["UNIQ_KEY"]) for x in recs] == [(b"many-10", s.msg_id)]
        assert query(w, "Q", "Many", unique=True).code == RC.QUERY_NOT_FOUND       # a key is not a msgId
        assert query(w, "Other", s.msg_id, unique=True).code == RC.QUERY_NOT_FOUND
    finally:
        w.close()


def test_the_client_and_appliance_query(store):
    sent = store.sent

    async def ask():
        async with Admin(store.namesrv) as admin:
            by_key = await admin.query_messages("Q", "Aa")
            one = await admin.query_unique("Q", sent["BB"][2].msg_id)
            viewed = await admin.view_message(sent["Aa"][0].offset_msg_id)
            with pytest.raises(MQBrokerError) as e:
                await admin.query_messages("Q", "nobody")
            return by_key, one, viewed, e.value
    by_key, one, viewed, missing = asyncio.run(ask())
    assert [m.msg_id for m in by_key] == [s.msg_id for s in reversed(sent["Aa"])]
    assert all(m.broker_name == store.cfg.brokerName for m in by_key)
    assert (one.body, one.keys, one.queue_offset) == (b"bb-2", ["BB"], sent["BB"][2].queue_offset)
    assert (viewed.body, viewed.offset_msg_id) == (b"aa-0", sent["Aa"][0].offset_msg_id)
    assert (missing.code, missing.remark) == (RC.QUERY_NOT_FOUND, NOT_FOUND)

    out = store.cmd("query", "-t", "Q", "--key", "BB", "--max", "2")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[-1] == "2 messages" and [ln.split("msgId=")[1].split()[0] for ln in lines[:-1]] == [
        sent["BB"][4].msg_id, sent["BB"][3].msg_id]
    assert "keys=BB" in lines[0] and "topic=Q" in lines[0] and lines[0].endswith("bb-4")
    out = store.cmd("query", "--id", sent["Many"][0].offset_msg_id)
    assert out.returncode == 0 and "many-0" in out.stdout and out.stdout.endswith("1 messages\n"), out
    out = store.cmd("query", "-t", "Q", "--uniq-key", "no-such-id")
    assert out.returncode == 1 and out.stdout == "0 messages\n", out
    out = store.cmd("query", "--key", "Aa")
    assert out.returncode == 2 and "need the topic (-t)" in out.stderr


@pytest.mark.skipif(javaclient.missing() is not None, reason=javaclient.missing() or "")
def test_the_real_mqadmin_queries_by_key_by_unique_key_and_by_id(store):
    sent = store.sent

    def mqadmin(*args: str) -> str:
        p = subprocess.run([javaclient.RMQ, "mqadmin", *args, "-n", store.namesrv], capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, RMQ_CLIENT_LOGS=os.path.join(store.dir, "mqadmin-logs")))
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout

    out = mqadmin("queryMsgByKey", "-t", "Q", "-k", "Aa")
    ids = [ln.split()[0] for ln in out.splitlines() if ln and not ln.startswith("#")]
    assert sorted(ids) == sorted(s.msg_id for s in sent["Aa"]), out
    out = mqadmin("queryMsgByUniqueKey", "-t", "Q", "-i", sent["BB"][1].msg_id)
    assert sent["BB"][1].msg_id in out and "Keys:" in out and "BB" in out, out
    out = mqadmin("queryMsgById", "-i", sent["Many"][5].offset_msg_id)
    assert sent["Many"][5].offset_msg_id in out and "Many" in out, out
