"""The name server as a real process (``appliance run nameserver``) over TCP, and started by
``appliance start`` when namesrvAddr points at this host."""
import json
import os
import re
import subprocess
import sys
import time
import zlib

import pytest

from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from tests.integration.harness import ROOT, create_topic
from tests.integration.test_readers import send_v2
from tests.integration.wire import Wire

CAPTURES = os.path.join(ROOT, "tests", "captures")
TC = {"TopicTest": {"order": False, "perm": 6, "readQueueNums": 4, "topicFilterType": "SINGLE_TAG",
                    "topicName": "TopicTest", "topicSysFlag": 0, "writeQueueNums": 4}}


def _register_body(topics):
    return json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": 1, "timestamp": 1}, "topicConfigTable": topics}}).encode()


def _wait_port(port, proc, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        try:
            Wire("127.0.0.1", port, 1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError("name server did not listen")


def _run_nameserver(tmp_path, extra: str = "") -> tuple[int, subprocess.Popen]:
    """``appliance run nameserver`` with its store root (and so its KV config) under tmp_path."""
    port = 19876 + os.getpid() % 500
    conf = tmp_path / "broker.conf"
    conf.write_text(f"namesrvAddr=127.0.0.1:{port}\nstorePathRootDir={tmp_path}/store\nbrokerIP1=127.0.0.1\n{extra}")
    proc = subprocess.Popen([sys.executable, "-m", "rocketbox.appliance", "run", "nameserver", "-c", str(conf)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return port, proc


@pytest.fixture
def nameserver(tmp_path):
    port, proc = _run_nameserver(tmp_path)
    try:
        _wait_port(port, proc)
        yield port, proc
    finally:
        proc.terminate()
        proc.wait(10)


def test_register_route_cluster_and_dialects(nameserver):
    port, _proc = nameserver
    w = Wire("127.0.0.1", port)
    reg = {"brokerName": "b1", "brokerAddr": "127.0.0.1:10911", "clusterName": "DefaultCluster",
           "haServerAddr": "127.0.0.1:10912", "brokerId": "0"}
    r = w.call(R.REGISTER_BROKER, reg, _register_body(TC))
    assert r.code == RC.SUCCESS and r.is_response and r.opaque == w.opaque
    r = w.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest"}, version=401)
    assert r.code == RC.SUCCESS
    route = json.loads(r.body)
    assert route["brokerDatas"] == [{"brokerAddrs": {"0": "127.0.0.1:10911"}, "brokerName": "b1", "cluster": "DefaultCluster"}]
    assert route["queueDatas"] == [{"brokerName": "b1", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 4}]
    old = w.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest"}, version=63)      # fastjson's unquoted keys
    assert b'"brokerAddrs":{0:"127.0.0.1:10911"}' in old.body
    with open(os.path.join(CAPTURES, "cpp-rocketmq044__105_GET_ROUTEINFO_BY_TOPIC.bin"), "rb") as f:
        cpp = w.call_raw(f.read())                                                  # a real client's bytes
    assert cpp.code == RC.SUCCESS and cpp.opaque == 0 and b"127.0.0.1:10911" in cpp.body
    r = w.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
    assert r.code == RC.TOPIC_NOT_EXIST and "Nope" in r.remark
    info = json.loads(w.call(R.GET_BROKER_CLUSTER_INFO).body)
    assert info["clusterAddrTable"] == {"DefaultCluster": ["b1"]}
    assert json.loads(w.call(R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body) == {"topicList": ["TopicTest"]}
    assert w.call(R.REGISTER_BROKER, dict(reg, bodyCrc32="12345"), _register_body(TC)).remark == "crc32 not match"
    bomb = zlib.compress(bytes(65 << 20), 9)                    # 65 KiB that would inflate to 65 MiB
    r = w.call(R.REGISTER_BROKER, dict(reg, brokerName="b2", compressed="true"), bomb)
    assert r.code == RC.SYSTEM_ERROR and r.remark == "register body does not parse: the compressed body inflates past 64 MiB"
    assert json.loads(w.call(R.GET_BROKER_CLUSTER_INFO).body)["clusterAddrTable"] == {"DefaultCluster": ["b1"]}
    # a Java broker registers an admin's new topic alone (registerIncrementBrokerData): the rest stays
    made = {"Made": dict(TC["TopicTest"], topicName="Made", readQueueNums=2, writeQueueNums=2)}
    assert w.call(R.REGISTER_BROKER, reg, _register_body(made)).code == RC.SUCCESS
    assert json.loads(w.call(R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body) == {"topicList": ["Made", "TopicTest"]}
    assert w.call(R.DELETE_TOPIC_IN_NAMESRV, {"topic": "Made"}).code == RC.SUCCESS     # an admin's deletion
    assert w.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "Made"}).code == RC.TOPIC_NOT_EXIST
    assert w.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest"}).code == RC.SUCCESS
    assert w.call(R.UNREGISTER_BROKER, {k: reg[k] for k in ("brokerName", "brokerAddr", "clusterName", "brokerId")}).code == 0
    assert w.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest"}).code == RC.TOPIC_NOT_EXIST
    w.close()


def test_kv_unknown_codes_bad_fields_and_a_malformed_frame(nameserver):
    port, proc = nameserver
    good, bad = Wire("127.0.0.1", port), Wire("127.0.0.1", port)
    r = good.call(R.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"})
    assert r.code == RC.QUERY_NOT_FOUND and "Namespace: ORDER_TOPIC_CONFIG Key: T" in r.remark
    assert good.call(R.PUT_KV_CONFIG, {"namespace": "N", "key": "k", "value": "v"}).code == 0
    assert good.call(R.GET_KV_CONFIG, {"namespace": "N", "key": "k"}).ext == {"value": "v"}
    r = good.call(999)
    assert r.code == RC.REQUEST_CODE_NOT_SUPPORTED and "999" in r.remark
    r = good.call(R.REGISTER_BROKER, {"brokerName": "b"})
    assert r.code == RC.SYSTEM_ERROR and "<brokerAddr> is null" in r.remark
    bad.sock.sendall(b"\x7f\xff\xff\xff garbage")                 # not a frame: that connection is closed
    assert bad.closed_by_peer()
    assert good.call(R.GET_KV_CONFIG, {"namespace": "N", "key": "k"}).ext == {"value": "v"}    # others live on
    assert proc.poll() is None
    good.close()
    bad.close()


def test_kv_config_survives_a_restart_in_kvconfig_json_and_a_bad_file_is_named(tmp_path):
    path = tmp_path / "store" / "namesrv" / "kvConfig.json"
    for step in ("put", "check and delete", "check deleted"):
        port, proc = _run_nameserver(tmp_path)
        try:
            _wait_port(port, proc)
            w = Wire("127.0.0.1", port)
            order = {"namespace": "ORDER_TOPIC_CONFIG", "key": "Orders"}
            if step == "put":
                for key, value in (("Orders", "b1:4"), ("Other", "b1:2"), ("Other", "b1:8")):
                    assert w.call(R.PUT_KV_CONFIG, {**order, "key": key, "value": value}).code == RC.SUCCESS
                assert json.loads(path.read_text()) == {"configTable": {"ORDER_TOPIC_CONFIG": {
                    "Orders": "b1:4", "Other": "b1:8"}}}
            elif step == "check and delete":
                assert w.call(R.GET_KV_CONFIG, order).ext == {"value": "b1:4"}
                table = json.loads(w.call(R.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"}).body)
                assert table == {"table": {"Orders": "b1:4", "Other": "b1:8"}}
                assert w.call(R.DELETE_KV_CONFIG, order).code == RC.SUCCESS
                assert w.call(R.DELETE_KV_CONFIG, {**order, "key": "Other"}).code == RC.SUCCESS
            else:
                assert w.call(R.GET_KV_CONFIG, order).code == RC.QUERY_NOT_FOUND
                assert json.loads(path.read_text()) == {"configTable": {}}
            w.close()
        finally:
            proc.terminate()
            assert proc.wait(10) == 0
    path.write_text('{"configTable": {"ORDER_TOPIC_CONFIG": ["not", "a", "map"]}}')
    path.with_suffix(".json.bak").unlink()
    port, proc = _run_nameserver(tmp_path)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "Traceback" not in err, err
    assert f"cannot start nameserver: {path}: not a KV config" in err, err

    (tmp_path / "a-file").write_text("")               # a KV config that cannot be written: the put is
    port, proc = _run_nameserver(tmp_path, f"kvConfigPath={tmp_path}/a-file/kvConfig.json\n")   # refused
    try:
        _wait_port(port, proc)
        w = Wire("127.0.0.1", port)
        r = w.call(R.PUT_KV_CONFIG, {"namespace": "N", "key": "k", "value": "v"})
        assert r.code == RC.SYSTEM_ERROR and "a-file" in r.remark, r.remark
        assert w.call(R.GET_KV_CONFIG, {"namespace": "N", "key": "k"}).code == RC.QUERY_NOT_FOUND
        w.close()
    finally:
        proc.terminate()
        proc.wait(10)


def test_appliance_start_runs_a_local_name_server(appliance_factory):
    port = 18876 + os.getpid() % 500
    app = appliance_factory(namesrvAddr=f"127.0.0.1:{port}").start()
    try:
        st = app.cmd("status")
        assert st.returncode == 0 and re.search(r"nameserver\s+up", st.stdout), st.stdout
        w = Wire("127.0.0.1", port)
        assert w.call(R.GET_BROKER_CLUSTER_INFO).code == RC.SUCCESS
        # a topic's creation is answered once the name server has its route (as RocketMQ's is),
        # whether an admin made it or a send did, and however many come at once
        broker = Wire("127.0.0.1", app.cfg.listenPort)
        create_topic(app, "Made", 2)
        assert json.loads(w.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "Made"}).body)["queueDatas"][0]["readQueueNums"] == 2
        assert send_v2(broker, "Sent", b"x").code == RC.SUCCESS
        assert w.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "Sent"}).code == RC.SUCCESS
        for i in range(20):                                     # pipelined: they share registrations
            broker.send(R.UPDATE_AND_CREATE_TOPIC, {"topic": f"Many{i}", "defaultTopic": "TBW102", "readQueueNums": "1",
                                                    "writeQueueNums": "1", "perm": "6", "topicFilterType": "SINGLE_TAG",
                                                    "order": "false"})
        assert [broker.read_response().code for _ in range(20)] == [RC.SUCCESS] * 20
        topics = json.loads(w.call(R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)["topicList"]
        assert {f"Many{i}" for i in range(20)} <= set(topics)
        # each registered the changed topics alone (readers/registration.py): the others stay routed
        assert {"Made", "Sent", "TBW102"} <= set(topics)
        assert json.loads(w.call(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "Made"}).body)["queueDatas"][0]["readQueueNums"] == 2
        broker.close()
        w.close()
    finally:
        assert app.stop() == 0
    assert "ERROR" not in app.log_text()


def test_a_name_server_that_comes_up_after_the_broker_gets_registered_with(tmp_path, appliance_factory):
    """namesrvAddr's second name server is down when the appliance starts: the broker logs that once,
    tries again with back-off (1 s, then 2, 4, ...), and registers when a try finds it up."""
    first, second = 18876 + os.getpid() % 500, 19376 + os.getpid() % 500
    app = appliance_factory(namesrvAddr=f"127.0.0.1:{first};127.0.0.1:{second}").start()
    conf = tmp_path / "second.conf"
    conf.write_text(f"namesrvAddr=127.0.0.1:{second}\nstorePathRootDir={tmp_path}/second\n")
    proc = None
    try:
        time.sleep(2.5)                              # tries at ~0, 1 and 3 s find nothing there
        proc = subprocess.Popen([sys.executable, "-m", "rocketbox.appliance", "run", "nameserver", "-c", str(conf)],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_port(second, proc)
        up, w = time.monotonic(), Wire("127.0.0.1", second)
        while b'"b1"' not in (w.call(R.GET_BROKER_CLUSTER_INFO).body or b""):
            assert time.monotonic() - up < 12, "the broker never registered with the late name server"
            time.sleep(0.2)
        w.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        assert app.stop() == 0
    log = app.log_text()
    assert log.count(f"cannot register with name server 127.0.0.1:{second}") == 1, log[-3000:]
    assert f"registered with name server 127.0.0.1:{second} again" in log, log[-3000:]
