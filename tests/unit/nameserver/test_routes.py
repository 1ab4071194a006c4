"""The route table and the register body, without sockets."""
import json
import struct
import zlib

import pytest

from rocketbox.nameserver.routes import BROKER_EXPIRE_S, RouteTable
from rocketbox.nameserver.service import MAX_INFLATED, parse_register_body

TC = {"TopicTest": {"topicName": "TopicTest", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "order": False},
      "Orders": {"topicName": "Orders", "readQueueNums": 8, "writeQueueNums": "8", "perm": 6, "topicSysFlag": 0}}
ROUTES = {"TopicTest": {"perm": 6, "readQueueNums": 4, "writeQueueNums": 4, "topicSysFlag": 0},   # TC as routes hold it
          "Orders": {"perm": 6, "readQueueNums": 8, "writeQueueNums": 8, "topicSysFlag": 0}}


def test_register_route_slave_and_unregister():
    t = RouteTable()
    assert t.register("C", "b1", "10.0.0.1:10911", 0, "10.0.0.1:10912", ROUTES, 0.0) == (None, None)
    assert t.register("C", "b1", "10.0.0.2:10911", 1, "10.0.0.2:10912", {}, 0.0) == ("10.0.0.1:10911", "10.0.0.1:10912")
    t.register("C", "b2", "10.0.0.3:10911", 0, "x", {"Orders": ROUTES["Orders"]}, 0.0)
    r = t.route("Orders")
    assert [b["brokerName"] for b in r["brokerDatas"]] == ["b1", "b2"]
    assert r["brokerDatas"][0]["brokerAddrs"] == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    assert r["queueDatas"][0] == {"brokerName": "b1", "perm": 6, "readQueueNums": 8, "topicSysFlag": 0, "writeQueueNums": 8}
    assert t.route("Nope") is None
    assert t.cluster_info()["clusterAddrTable"] == {"C": ["b1", "b2"]}
    # a registration of one topic (a Java broker's after an admin made it) updates that topic, keeps the rest
    t.register("C", "b1", "10.0.0.1:10911", 0, "h", {"Orders": {**ROUTES["Orders"], "perm": 4}}, 1.0)
    assert [q["perm"] for q in t.route("Orders")["queueDatas"]] == [4, 6]
    assert t.route("TopicTest")["queueDatas"] == [{"brokerName": "b1", **ROUTES["TopicTest"]}]
    t.delete_topic("TopicTest")                                  # DELETE_TOPIC_IN_NAMESRV: gone everywhere
    assert t.route("TopicTest") is None
    t.unregister("b2", "10.0.0.3:10911", 0)
    assert [b["brokerName"] for b in t.route("Orders")["brokerDatas"]] == ["b1"]
    assert t.cluster_info()["clusterAddrTable"] == {"C": ["b1"]}


def test_silent_brokers_expire():
    t = RouteTable()
    t.register("C", "b1", "a1", 0, "h", ROUTES, 0.0)
    t.register("C", "b2", "a2", 0, "h", ROUTES, 100.0)
    assert t.expire(BROKER_EXPIRE_S + 50.0) == ["a1"]
    assert [b["brokerName"] for b in t.route("TopicTest")["brokerDatas"]] == ["b2"]
    assert t.expire(BROKER_EXPIRE_S + 101.0) == ["a2"]
    assert t.route("TopicTest") is None and t.cluster_info() == {"brokerAddrTable": {}, "clusterAddrTable": {}}


def test_register_body_plain_and_compressed():
    plain = json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": 1, "timestamp": 5}, "topicConfigTable": TC}}).encode()
    assert parse_register_body(plain, False) == ROUTES

    def chunk(s):
        b = s.encode()
        return struct.pack(">i", len(b)) + b
    raw = chunk('{"counter":1,"timestamp":5}') + struct.pack(">i", 2) + chunk("TopicTest 4 4 6 SINGLE_TAG") \
        + chunk("Orders 8 8 6 SINGLE_TAG") + chunk("[]")
    assert parse_register_body(zlib.compress(raw, 9), True) == ROUTES


def test_a_compressed_register_body_is_inflated_only_so_far():
    bomb = zlib.compress(bytes(MAX_INFLATED + 1), 9)            # ~65 KiB that would inflate to 64 MiB + 1
    assert len(bomb) < 1 << 17
    with pytest.raises(ValueError, match="inflates past 64 MiB"):
        parse_register_body(bomb, True)
    whole = zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", 0), 9)
    assert parse_register_body(whole, True) == {}
    with pytest.raises(ValueError, match="cut short"):
        parse_register_body(whole[:-3], True)


@pytest.mark.parametrize("body, says", [
    (b"[1]", None),                                         # no wrapper: no topics
    (b'{"topicConfigSerializeWrapper": 3}', None),
    (b'{"topicConfigSerializeWrapper": {"topicConfigTable": 5}}', "topicConfigTable is not an object"),
    (b'{"topicConfigSerializeWrapper": {"topicConfigTable": {"T": 5}}}', "the config of topic T is not an object"),
    (b'{"topicConfigSerializeWrapper": {"topicConfigTable": {"T": {"perm": "x"}}}}', "the config of topic T: invalid"),
    (b'{"topicConfigSerializeWrapper": {"topicConfigTable": {"T": {"readQueueNums": null}}}}', "the config of topic T: "),
])
def test_a_register_body_is_taken_whole_or_refused_with_what_is_wrong(body, says):
    if says is None:
        assert parse_register_body(body, False) == {}
        return
    with pytest.raises(ValueError) as e:
        parse_register_body(body, False)
    assert says in str(e.value), str(e.value)


def _register_cmd(addr: str, broker_id: int, code: int):
    from rocketbox.remoting.codec import Command
    from rocketbox.remoting.codes import RequestCode as R
    body = json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": 1, "timestamp": 5}, "topicConfigTable": TC}}).encode()
    ext = {"brokerName": "b1", "brokerAddr": addr, "clusterName": "C", "haServerAddr": addr, "brokerId": str(broker_id),
           "compressed": "false", "bodyCrc32": "0"}
    return Command(code, ext, body if code == R.REGISTER_BROKER else b"")


def test_a_broker_goes_with_the_connection_it_registered_through_and_only_with_it(tmp_path, caplog):
    """4.9.8's onChannelDestroy: a killed master's routes go at once; a broker that registered again
    through another connection, or unregistered, is not touched by an old one's close."""
    from rocketbox.nameserver.service import NameServer
    from rocketbox.remoting.codes import RequestCode as R
    ns = NameServer("127.0.0.1", 0, str(tmp_path / "kv.json"))
    first, second, slave = object(), object(), object()
    ns.register_broker(_register_cmd("m:1", 0, R.REGISTER_BROKER), first)
    ns.register_broker(_register_cmd("s:1", 1, R.REGISTER_BROKER), slave)
    ns.register_broker(_register_cmd("m:1", 0, R.REGISTER_BROKER), second)     # reconnected
    ns.closed(first)                                                          # the old one: nothing
    assert ns.routes.route("Orders")["brokerDatas"][0]["brokerAddrs"] == {0: "m:1", 1: "s:1"}
    ns.closed(second)                                                         # killed: gone, the slave stays
    assert ns.routes.route("Orders")["brokerDatas"][0]["brokerAddrs"] == {1: "s:1"}
    ns.unregister_broker(_register_cmd("s:1", 1, R.UNREGISTER_BROKER), slave)
    caplog.clear()
    ns.closed(slave)                                                          # unregistered first: quiet
    assert ns.routes.route("Orders") is None and "unregistered" not in caplog.text
