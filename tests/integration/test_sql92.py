"""SQL92 property filters (FACTS-wave2 §6): with ``enablePropertyFilter=true`` a subscription by
``MessageSelector.bySql`` (the Java 4.9.8 client's) or ``subscribe(..., sql=True)`` (ours) gets
exactly the messages its expression matches; without it, or for an expression that does not
parse, the consumer's start is refused with 4.9.8's codes, and so is a pull."""
from __future__ import annotations

import asyncio

import pytest

from rocketbox.client.consumer import PushConsumer
from rocketbox.client.errors import MQBrokerError
from rocketbox.client.message import Message
from rocketbox.client.producer import Producer
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from tests.integration import javaclient
from tests.integration.harness import create_topic, wait_route
from tests.integration.test_readers import pull
from tests.integration.wire import Wire

EXPR = "a > 5 AND b = 'x'"
WANTED = [f"m{i}" for i in range(20) if i > 5 and i % 2 and i % 5]
DISABLED = "The broker does not support consumer to filter message by SQL92"


def _produce(app, topic: str) -> None:
    """20 messages: ``a`` = i (left out when i is a multiple of 5), ``b`` x for odd i, else y."""
    async def go():
        async with Producer("sql-producer", app.namesrv) as p:
            for i in range(20):
                props = {"b": "x" if i % 2 else "y"} | ({"a": str(i)} if i % 5 else {})
                await p.send(Message(topic, f"m{i}".encode(), tags="T", properties=props))
    asyncio.run(go())


async def _consume(app, topic: str, group: str, expression: str, want: int, seconds: float = 20) -> list[str]:
    got: list[str] = []
    done = asyncio.Event()

    def listener(msgs):
        got.extend(m.body.decode() for m in msgs)
        if len(got) >= want:
            done.set()
        return True
    c = PushConsumer(group, app.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET")
    await c.subscribe(topic, expression, sql=True).register(listener).start()
    try:
        await asyncio.wait_for(done.wait(), seconds)
        await asyncio.sleep(1.0)                       # one that should not come would come by now
    finally:
        await c.shutdown()
    return got


def test_java_and_python_consumers_get_exactly_what_their_expression_matches(appliance_factory, java_classes,
                                                                              tmp_path):
    app = appliance_factory(namesrv=True, enablePropertyFilter="true").start()
    create_topic(app, "Sql", 4)
    wait_route(app, "Sql")
    _produce(app, "Sql")
    out = javaclient.run(java_classes, "SqlConsumer", app.namesrv, "Sql", "sql-java", EXPR, str(len(WANTED)), "30000",
                         logs=str(tmp_path / "java-logs"))
    assert out.splitlines()[-1] == "done", out
    assert sorted(ln[5:] for ln in out.splitlines() if ln.startswith("body=")) == sorted(WANTED), out
    got = asyncio.run(_consume(app, "Sql", "sql-py", EXPR, len(WANTED)))
    assert sorted(got) == sorted(WANTED)
    got = asyncio.run(_consume(app, "Sql", "sql-py-null", "a IS NULL OR b NOT IN ('x', 'y')", 4))
    assert sorted(got) == ["m0", "m10", "m15", "m5"]                    # a is left out of these

    w = Wire("127.0.0.1", app.cfg.listenPort)                           # a pull with a broken expression
    try:
        r = w.call(R.PULL_MESSAGE, {"consumerGroup": "sql-py", "topic": "Sql", "queueId": "0", "queueOffset": "0",
                                    "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                                    "subscription": "a >", "subVersion": "0", "expressionType": "SQL92"})
        assert (r.code, r.remark) == (RC.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed")
    finally:
        w.close()

    out = javaclient.run(java_classes, "SqlConsumer", app.namesrv, "Sql", "sql-java-bad", "a > 'x'", "1", "1000",
                         logs=str(tmp_path / "java-logs"))
    assert out.startswith(f"refused code={RC.SUBSCRIPTION_PARSE_FAILED} ") and "cannot be compared" in out, out
    with pytest.raises(MQBrokerError) as e:
        asyncio.run(_consume(app, "Sql", "sql-py-bad", "(a = 1", 1))
    assert e.value.code == RC.SUBSCRIPTION_PARSE_FAILED


def test_without_enable_property_filter_sql_subscriptions_are_refused(appliance_factory, java_classes, tmp_path):
    app = appliance_factory(namesrv=True).start()
    create_topic(app, "SqlOff", 2)
    wait_route(app, "SqlOff")
    _produce(app, "SqlOff")
    out = javaclient.run(java_classes, "SqlConsumer", app.namesrv, "SqlOff", "sql-off", EXPR, "1", "1000",
                         logs=str(tmp_path / "java-logs"))
    assert out.startswith(f"refused code={RC.SYSTEM_ERROR} ") and DISABLED in out, out
    with pytest.raises(MQBrokerError) as e:
        asyncio.run(_consume(app, "SqlOff", "sql-off-py", EXPR, 1))
    assert (e.value.code, e.value.remark) == (RC.SYSTEM_ERROR, DISABLED)
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        r = pull(w, "SqlOff", 0, flag=4, sub=EXPR)             # (expressionType TAG: a tag named so)
        assert r.code in (RC.SUCCESS, RC.PULL_RETRY_IMMEDIATELY, RC.PULL_NOT_FOUND)
        r = w.call(R.PULL_MESSAGE, {"consumerGroup": "g1", "topic": "SqlOff", "queueId": "0", "queueOffset": "0",
                                    "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                                    "subscription": EXPR, "subVersion": "0", "expressionType": "SQL92"})
        assert (r.code, r.remark) == (RC.SYSTEM_ERROR, DISABLED)
    finally:
        w.close()
