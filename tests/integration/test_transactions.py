"""Transactional messages (FACTS §9.3): with ``rejectTransactionMessage=true`` half messages are
refused NO_PERMISSION with Java's remark (broker:processor/SendMessageProcessor.java) for our
client, a raw batch and the real Java 4.9.8 TransactionMQProducer, and nothing is stored; with
false, half messages are stored out of sight and END_TRANSACTION commits or rolls back each once,
on the wire and from the Java producer."""
from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

from rocketbox.client.errors import MQBrokerError
from rocketbox.client.message import Message
from rocketbox.client.producer import Producer
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.store import message
from tests.integration import javaclient
from tests.integration.harness import create_topic, dispatched, read_topic, wait_route
from tests.integration.test_readers import frozen, send_ext, send_v2
from tests.integration.wire import Wire

REMARK = "the broker[127.0.0.1] sending transaction message is forbidden"      # brokerIP1, as Java's


def _max_offsets(app, topic: str, queues: int) -> list[int]:
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        return [int(w.call(R.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)}).ext["offset"]) for q in range(queues)]
    finally:
        w.close()


def test_half_messages_are_refused_with_no_permission_and_never_stored(appliance_factory, java_classes, tmp_path):
    app = appliance_factory(namesrv=True, rejectTransactionMessage="true").start()
    create_topic(app, "Tx", 4)
    wait_route(app, "Tx")

    async def ours():
        async with Producer("tx-py", app.namesrv) as p:
            for value in ("true", "TRUE"):              # Boolean.parseBoolean
                with pytest.raises(MQBrokerError) as e:
                    await p.send(Message("Tx", b"half", properties={"TRAN_MSG": value, "PGROUP": "tx-py"}))
                assert (e.value.code, e.value.remark) == (RC.NO_PERMISSION, REMARK)
            with pytest.raises(MQBrokerError) as e:     # one half message among normal ones in a batch
                await p.send_batch([Message("Tx", b"a"), Message("Tx", b"b", properties={"TRAN_MSG": "true"})])
            assert (e.value.code, e.value.remark) == (RC.NO_PERMISSION, REMARK)
            await p.send_oneway(Message("Tx", b"oneway half", properties={"TRAN_MSG": "true"}))
    asyncio.run(ours())

    w = Wire("127.0.0.1", app.cfg.listenPort)           # the batch request's own properties
    r = w.call(R.SEND_BATCH_MESSAGE, send_ext("Tx", "TRAN_MSG\x01true\x02", m="true"),
               message.encode_client_batch([(0, b"x", "")]))
    assert (r.code, r.remark) == (RC.NO_PERMISSION, REMARK)
    w.close()

    out = javaclient.run(java_classes, "TxProducer", app.namesrv, "Tx", logs=str(tmp_path / "java-logs"))
    lines = out.splitlines()                             # the exception's cause chain, then the callback's count
    assert lines[0].startswith("exception=MQClientException code=-1 message=send message Exception"), out
    assert lines[1].startswith("exception=MQClientException code=16 message=Send [3] times, still failed"), out
    assert lines[2:] == [f"exception=MQBrokerException code=16 message={REMARK}",
                         "executed=0 checked=0"], out      # the local transaction never ran

    assert _max_offsets(app, "Tx", 4) == [0, 0, 0, 0]

    async def normal():
        async with Producer("tx-py", app.namesrv) as p:
            return await p.send(Message("Tx", b"normal", properties={"TRAN_MSG": "false"}))
    sent = asyncio.run(normal())
    assert (sent.status, sent.queue_offset) == ("SEND_OK", 0)
    got = asyncio.run(read_topic(app, "Tx"))
    assert [(m.body, m.queue_offset, m.commit_log_offset) for m in got] == [(b"normal", 0, 0)]   # nothing before it


def _half(w: Wire, topic: str, body: bytes, group: str = "txg", queue: int = 1):
    """A half message as a Java TransactionMQProducer sends it -> (its CommitLog offset, half queue offset)."""
    r = send_v2(w, topic, body, f"TRAN_MSG\x01true\x02PGROUP\x01{group}\x02UNIQ_KEY\x01U-{body.decode()}",
                queue=queue, f=str(message.TX_PREPARED))
    assert r.code == RC.SUCCESS and r.ext["queueId"] == str(queue), r.remark
    return message.parse_offset_msg_id(r.ext["msgId"])[2], int(r.ext["queueOffset"])


def _end(phys: int, qoff: int, decision: int, group: str = "txg", msg_id: str = "U") -> dict:
    return {"producerGroup": group, "tranStateTableOffset": str(qoff), "commitLogOffset": str(phys),
            "commitOrRollback": str(decision), "fromTransactionCheck": "false", "msgId": msg_id}


def _bodies(w: Wire, topic: str, queues: int = 2) -> list[bytes]:
    from tests.integration.test_readers import pull
    return sorted(r.body for q in range(queues) for r in message.decode_records(pull(w, topic, 0, queue=q).body))


def test_end_transaction_commits_or_rolls_back_once_and_refuses_what_does_not_match(appliance_factory):
    from tests.integration.test_metrics import scrape
    from tests.unit.metrics.test_collect import value
    app = appliance_factory().start()
    create_topic(app, "TxWire", 2)
    readers = [Wire("127.0.0.1", app.cfg.reader_port(i)) for i in range(2)]
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        phys, qoff = _half(readers[0], "TxWire", b"a")
        assert _max_offsets(app, "TxWire", 2) == [0, 0]                       # out of sight until committed
        out = app.cmd("transactions")
        rows = out.stdout.splitlines()
        assert out.returncode == 0 and rows[-1].startswith("1 open transactions"), out
        assert rows[1].split()[0] == str(qoff) and rows[1].split()[2:5] == ["0", "txg", "TxWire"], rows
        asyncio.run(dispatched(app))
        assert value(scrape(app), "rocketmq_half_messages") == 1
        for bad, why in ((_end(phys, qoff, 8, group="other"), "The producer group wrong"),
                         (_end(phys, qoff + 1, 8), "The transaction state table offset wrong"),
                         (_end(phys + 1, qoff, 8), "Find prepared transaction message failed"),
                         (_end(1 << 40, qoff, 8), "Find prepared transaction message failed")):
            r = readers[1].call(R.END_TRANSACTION, bad)
            assert (r.code, r.remark) == (RC.SYSTEM_ERROR, why)
        plain = message.parse_offset_msg_id(send_v2(w, "TxWire", b"plain").ext["msgId"])[2]
        r = readers[1].call(R.END_TRANSACTION, _end(plain, 0, 8))              # not a half message
        assert (r.code, r.remark) == (RC.SYSTEM_ERROR, "Find prepared transaction message failed")
        readers[1].oneway(R.END_TRANSACTION, _end(phys, qoff, 0))             # unknown: no answer, nothing stored

        # the same commit on both readers at once, then again, then a rollback: stored once
        opaques = [rd.send(R.END_TRANSACTION, _end(phys, qoff, 8)) for rd in readers]
        assert all(op > 0 for op in opaques)
        assert [rd.read_response().code for rd in readers] == [RC.SUCCESS, RC.SUCCESS]
        assert readers[0].call(R.END_TRANSACTION, _end(phys, qoff, 8)).code == RC.SUCCESS
        assert readers[1].call(R.END_TRANSACTION, _end(phys, qoff, 12)).code == RC.SUCCESS

        phys_b, qoff_b = _half(readers[1], "TxWire", b"b")                    # rolled back, then a late commit
        assert readers[0].call(R.END_TRANSACTION, _end(phys_b, qoff_b, 12)).code == RC.SUCCESS
        assert readers[1].call(R.END_TRANSACTION, _end(phys_b, qoff_b, 8)).code == RC.SUCCESS

        with frozen(app, "dispatcher"):                    # an END right behind its SEND_OK, on the other reader
            phys_c, qoff_c = _half(readers[0], "TxWire", b"c", queue=0)
            assert readers[1].call(R.END_TRANSACTION, _end(phys_c, qoff_c, 8)).code == RC.SUCCESS
        asyncio.run(dispatched(app))
        assert _bodies(w, "TxWire") == [b"a", b"c", b"plain"]
        samples = scrape(app)                              # each transaction counted once, whoever ended it
        assert [value(samples, n) for n in ("rocketmq_commit_messages_total", "rocketmq_rollback_messages_total",
                                            "rocketmq_half_messages")] == [2, 1, 0]
        from tests.integration.test_readers import pull
        committed = {r.body: r for q in range(2) for r in message.decode_records(pull(w, "TxWire", 0, queue=q).body)}
        a = committed[b"a"]
        assert (a.queue_id, a.tx_type, a.prepared_offset) == (1, message.TX_COMMIT, phys)
        assert (a.properties["REAL_TOPIC"], a.properties["REAL_QID"], a.properties["TRAN_MSG"],
                a.properties["PGROUP"]) == ("TxWire", "1", "true", "txg")                  # as 4.9.8 stores it
        ops = message.decode_records(pull(w, "RMQ_SYS_TRANS_OP_HALF_TOPIC", 0).body)
        assert sorted(r.body for r in ops) == sorted(b"%d" % q for q in (qoff, qoff_b, qoff_c))   # one op each
        assert {r.properties["TAGS"] for r in ops} == {"d"}
    finally:
        for c in (*readers, w):
            c.close()
    # a restarted writer rebuilds which transactions are ended from the op queue
    assert app.stop() == 0
    app.start()
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        assert w.call(R.END_TRANSACTION, _end(phys, qoff, 8)).code == RC.SUCCESS
        phys_d, qoff_d = _half(w, "TxWire", b"d")
        assert w.call(R.END_TRANSACTION, _end(phys_d, qoff_d, 8)).code == RC.SUCCESS
        asyncio.run(dispatched(app))
        assert _bodies(w, "TxWire") == [b"a", b"c", b"d", b"plain"]
    finally:
        w.close()


def test_the_java_producer_commits_and_rolls_back_each_transaction_once(appliance_factory, java_classes, tmp_path):
    app = appliance_factory(namesrv=True).start()
    create_topic(app, "TxJava", 4)
    wait_route(app, "TxJava")
    decisions = ["commit", "rollback", "commit", "commit", "rollback", "commit"]
    out = javaclient.run(java_classes, "TxProducer", app.namesrv, "TxJava", ",".join(decisions),
                         logs=str(tmp_path / "java-logs"))
    lines = out.splitlines()
    assert [ln.split(" msgId=")[0] for ln in lines[:-1]] == [
        f"sent={i} status=SEND_OK local={'COMMIT' if d == 'commit' else 'ROLLBACK'}_MESSAGE" for i, d in enumerate(decisions)]
    assert lines[-1] == f"executed={len(decisions)} checked=0", out
    got = asyncio.run(read_topic(app, "TxJava"))
    assert sorted(m.body for m in got) == sorted(b"tx-%d" % i for i, d in enumerate(decisions) if d == "commit")
    ids = {ln.split(" msgId=")[1] for ln in lines[:-1]}
    assert {m.properties["UNIQ_KEY"] for m in got} <= ids


def test_undecided_transactions_are_checked_back_then_committed_or_discarded(appliance_factory, java_classes,
                                                                              tmp_path):
    """UNKNOW from the local transaction: the scheduler checks it back (CHECK_TRANSACTION_STATE,
    through the reader holding the producer's connection) once ``transactionTimeOut`` has passed;
    the check listener's COMMIT delivers it once. One whose check keeps answering UNKNOW is
    discarded after ``transactionCheckMax`` checks: copied to TRANS_CHECK_MAX_TIME_TOPIC with
    TRANSACTION_CHECK_TIMES, never delivered."""
    app = appliance_factory(namesrv=True, transactionTimeOut="500",
                            transactionCheckInterval="500", transactionCheckMax="2").start()
    create_topic(app, "TxCheck", 2)
    wait_route(app, "TxCheck")
    decisions = ["unknown", "commit", "never", "unknown", "rollback"]
    out = javaclient.run(java_classes, "TxProducer", app.namesrv, "TxCheck", ",".join(decisions), "4", "30",
                         logs=str(tmp_path / "java-logs"), timeout=120)
    lines = out.splitlines()
    assert [ln.split(" local=")[1].split()[0] for ln in lines[:-1]] == [
        "UNKNOW", "COMMIT_MESSAGE", "UNKNOW", "UNKNOW", "ROLLBACK_MESSAGE"], out
    assert lines[-1] == "executed=5 checked=4", out           # 0 and 3 once, 2 twice (transactionCheckMax)
    deadline = time.monotonic() + 15
    while True:                                                 # the discard comes at the pass after the last check
        w = Wire("127.0.0.1", app.cfg.listenPort)
        from tests.integration.test_readers import pull
        gone = message.decode_records(pull(w, "TRANS_CHECK_MAX_TIME_TOPIC", 0).body)
        w.close()
        if gone or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert [(r.body, r.properties["TRANSACTION_CHECK_TIMES"], r.properties["REAL_TOPIC"]) for r in gone] == [
        (b"tx-2", "2", "TxCheck")]
    got = asyncio.run(read_topic(app, "TxCheck"))
    assert sorted(m.body for m in got) == [b"tx-0", b"tx-1", b"tx-3"]          # each once
    state = json.loads(open(os.path.join(app.cfg.config_dir, "transactionCheck.json")).read())
    assert state["halfOffset"] == 5 and state["checkTimes"] == {}, state        # every half ended


def test_the_python_transactional_producer_commits_rolls_back_and_answers_check_backs(appliance_factory):
    from rocketbox import TransactionProducer
    app = appliance_factory(namesrv=True, transactionTimeOut="300", transactionCheckInterval="300").start()
    create_topic(app, "TxPy", 2)
    wait_route(app, "TxPy")
    checked: list[str] = []

    def check(msg):                      # the broker's check-back: 'unknown' commits, 'failed' rolls back
        checked.append(msg.body.decode())
        assert msg.topic == "TxPy" and int(msg.properties["TRANSACTION_CHECK_TIMES"]) >= 1
        return "COMMIT" if msg.body == b"unknown" else "ROLLBACK"

    async def local(msg, arg):
        if arg == "raise":
            raise RuntimeError("the local transaction failed")
        return arg

    async def go():
        async with TransactionProducer("tx-py-group", app.namesrv, check) as p:
            states = [(await p.send_in_transaction(Message("TxPy", body.encode()), local, arg)).local_state
                      for body, arg in (("commit", "COMMIT"), ("rollback", "ROLLBACK"), ("unknown", "UNKNOWN"),
                                        ("failed", "raise"))]
            deadline = time.monotonic() + 20
            while len(checked) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)                 # the check's END_TRANSACTION on its way
            return states
    states = asyncio.run(go())
    assert states == ["COMMIT", "ROLLBACK", "UNKNOWN", "UNKNOWN"]
    assert sorted(checked) == ["failed", "unknown"]
    got = asyncio.run(read_topic(app, "TxPy"))
    assert sorted(m.body for m in got) == [b"commit", b"unknown"]
    assert all(m.properties["TRAN_MSG"] == "true" and m.properties["PGROUP"] == "tx-py-group" for m in got)


def test_kills_of_every_role_and_of_the_whole_appliance_lose_no_commit_and_deliver_no_rollback(appliance_factory):
    """1,000 transactions under SYNC_FLUSH, a third each committed, rolled back and left UNKNOWN
    (then committed by the check-back), while each role is killed with SIGKILL at random points,
    twice, and the whole appliance once: every acknowledged commit is delivered, no rollback ever
    is, and a committed message stored twice comes from two halves (a send tried again after a
    lost reply, which the client cannot tell from a failed one), never from one half committed
    twice. The duplicates are counted and printed."""
    import collections
    import contextlib
    import random
    import signal

    from rocketbox import TransactionProducer
    from rocketbox.appliance.check import check, scan_commitlog
    app = appliance_factory(namesrv=True, flushDiskType="SYNC_FLUSH", transactionTimeOut="1000",
                            transactionCheckInterval="1000").start()
    create_topic(app, "TxChaos", 4)
    wait_route(app, "TxChaos")
    rng = random.Random(11)
    decided: dict[str, str] = {}             # body -> how the producer ended it; its check answers the same
    committed, rolled_back, kills = set(), set(), []
    states = {"commit": "COMMIT", "rollback": "ROLLBACK", "unknown": "UNKNOWN"}

    def check_back(msg):
        return decided.get(msg.body.decode(), "ROLLBACK")    # a half whose send failed: never wanted

    def local(msg, arg):
        decided[msg.body.decode()] = "ROLLBACK" if arg == "rollback" else "COMMIT"
        return states[arg]

    order = ["writer", "dispatcher", "flusher", "scheduler", "reader-0", "reader-1"] * 2
    rng.shuffle(order)
    order.insert(len(order) // 2, "ALL")
    plan = dict(zip(sorted(rng.sample(range(20, 980), len(order))), order))    # transaction index -> what dies

    def kill(role: str) -> None:
        if role == "ALL":                                        # a power cut for the processes
            app.kill9()
            app.start(60)
            kills.append(role)
            return
        deadline = time.monotonic() + 10                         # one killed just before may be restarting
        while time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):
                os.kill(app.role_pid(role), signal.SIGKILL)
                kills.append(role)
                return
            time.sleep(0.1)

    async def run() -> None:
        restarts = []
        async with TransactionProducer("tx-chaos", app.namesrv, check_back, send_timeout_s=3) as p:
            for i in range(1000):
                if i in plan:                                    # (the whole appliance restarts meanwhile)
                    restarts.append(asyncio.create_task(asyncio.to_thread(kill, plan[i])))
                    await asyncio.sleep(0)
                arg, body = ("commit", "rollback", "unknown")[i % 3], f"tx-{i}"
                try:
                    r = await p.send_in_transaction(Message("TxChaos", body.encode()), local, arg)
                except Exception:            # not acknowledged: its outcome is the check's (rolled back)
                    await asyncio.sleep(0.05)
                    continue
                if r.status == "SEND_OK":
                    (rolled_back if arg == "rollback" else committed).add(body)
            await asyncio.gather(*restarts)
            deadline = time.monotonic() + 90                     # the undecided ones checked back (a producer
            while time.monotonic() < deadline:                   # is known again at its next heartbeat, <= 30 s)
                out = await asyncio.to_thread(app.cmd, "transactions")
                if out.returncode == 0 and out.stdout.splitlines()[-1].startswith("0 open"):
                    break
                await asyncio.sleep(0.5)
    asyncio.run(run())
    assert app.stop() == 0
    assert sorted(kills) == sorted(order), kills
    assert len(committed) > 300 and len(rolled_back) > 150, (len(committed), len(rolled_back))
    rep = check(app.cfg)
    assert rep.clean, rep.problems[:5]
    halves: dict[str, list[int]] = collections.defaultdict(list)    # body -> the half each stored copy came from
    for _phys, r in scan_commitlog(app.cfg):
        if r.topic == "TxChaos":
            halves[r.body.decode()].append(r.prepared_offset)
    assert not [b for b in committed if not halves.get(b)], [b for b in committed if not halves.get(b)][:5]
    assert not [b for b in halves if decided.get(b) != "COMMIT"], [b for b in halves if decided.get(b) != "COMMIT"][:5]
    assert all(len(set(h)) == len(h) for h in halves.values()), {b: h for b, h in halves.items() if len(set(h)) < len(h)}
    twice = {b: len(h) for b, h in halves.items() if len(h) > 1}
    print(f"transactions under kills ({', '.join(kills)}): {len(committed)} committed, {len(rolled_back)} rolled "
          f"back, acknowledged; {len(twice)} delivered more than once, each from halves of its own tries")
