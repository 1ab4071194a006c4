"""The ``rocketbox`` PySpark data source (spark/) in real local Spark (``local[2]``) over the store
of a running appliance: a batch read returns exactly the messages our client pulls, field by
field; options and pushed-down filters narrow it (fewer partitions, fewer records) and give the
same rows as the same query filtered by Spark alone; errors name what is wrong."""
from __future__ import annotations

import asyncio
import os

import pytest

from rocketbox.client.message import Message
from rocketbox.client.producer import Producer
from tests.integration.harness import read_topic

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def spark():
    from rocketbox.spark import session
    s = session("rocketbox-tests")
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


def _send(app, topic: str, n: int) -> list:
    async def run():
        async with Producer("spark-pg", app.namesrv) as p:
            out = []
            for i in range(n):
                out.append(await p.send(Message(topic, b"body-%d-" % i + b"x" * (i % 50), tags=f"T{i % 3}",
                                                keys=[f"k{i}", "all"], properties={"n": str(i)})))
            return out
    return asyncio.run(run())


def test_a_batch_read_returns_what_the_client_pulls_field_by_field(appliance_factory, spark):
    app = appliance_factory(namesrv=True).start()
    sent = _send(app, "Sparked", 120)
    pulled = {m.msg_id: m for m in asyncio.run(read_topic(app, "Sparked"))}
    df = spark.read.format("rocketbox").option("path", app.cfg.root).option("topic", "Sparked").load()
    rows = df.collect()
    assert len(rows) == len(pulled) == 120 and {r.uniqKey for r in rows} == {s.msg_id for s in sent}
    for r in rows:
        m = pulled[r.uniqKey]
        assert (r.topic, r.queueId, r.queueOffset, r.msgId, r.body) == (m.topic, m.queue_id, m.queue_offset,
                                                                        m.offset_msg_id, m.body)
        assert r.physicalOffset == m.commit_log_offset and r.reconsumeTimes == m.reconsume_times
        assert int(r.storeTimestamp.timestamp() * 1000) == m.store_timestamp
        assert int(r.bornTimestamp.timestamp() * 1000) == m.born_timestamp
        assert r.tags == m.properties["TAGS"] and r.keys == m.properties["KEYS"] and dict(r.properties) == m.properties

    # options, and the same query with pushdown and with Spark's filters alone
    some = spark.read.format("rocketbox").option("path", app.cfg.root).option("topic", "Sparked") \
        .option("queues", "1,2").option("maxRecordsPerPartition", "7").load()
    assert sorted(r.queueId for r in some.collect()) == sorted(m.queue_id for m in pulled.values() if m.queue_id in (1, 2))
    mid = sorted(m.store_timestamp for m in pulled.values())[60]
    query = df.where("tags = 'T1' AND queueId = 0 AND storeTimestamp >= timestamp_millis(%d)" % mid)
    want = sorted(m.msg_id for m in pulled.values() if m.properties["TAGS"] == "T1" and m.queue_id == 0
                  and m.store_timestamp >= mid)
    assert sorted(r.uniqKey for r in query.collect()) == want
    from rocketbox.spark import register
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    register(spark)
    try:
        plain = spark.read.format("rocketbox").option("path", app.cfg.root).option("topic", "Sparked").load()
        assert sorted(r.uniqKey for r in plain.where(
            "tags = 'T1' AND queueId = 0 AND storeTimestamp >= timestamp_millis(%d)" % mid).collect()) == want
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        register(spark)
    # what the pushdown plans: queue 0 alone, from the time on, and only entries whose tag hash is T1's
    from pyspark.sql.datasource import CaseInsensitiveDict, EqualTo, GreaterThanOrEqual

    from rocketbox.spark import storefiles
    from rocketbox.spark.source import PushdownReader
    reader = PushdownReader(CaseInsensitiveDict({"path": app.cfg.root, "topic": "Sparked", "maxRecordsPerPartition": "7"}))
    kept = list(reader.pushFilters([EqualTo(("tags",), "T1"), EqualTo(("queueId",), 0),
                                    GreaterThanOrEqual(("storeTimestamp",), mid)]))
    assert len(kept) == 3                                      # Spark applies them again
    parts = reader.partitions()
    assert {p.qid for p in parts} == {0} and parts[0].tags == {"T1"}
    planned = sum(p.end - p.start for p in parts)
    assert planned == len([m for m in pulled.values() if m.queue_id == 0 and m.store_timestamp >= mid])
    read = sum(storefiles.read_batch(app.cfg.root, "Sparked", 0, p.start, p.end, tags=p.tags).num_rows for p in parts)
    assert read == len(want) < planned < 120
    from rocketbox.spark.source import RecordsAt
    target = sent[17].msg_id                                   # a uniqKey: through the IndexFile
    by_key = PushdownReader(CaseInsensitiveDict({"path": app.cfg.root, "topic": "Sparked"}))
    list(by_key.pushFilters([EqualTo(("uniqKey",), target)]))
    parts = by_key.partitions()
    assert all(isinstance(p, RecordsAt) for p in parts) and 1 <= sum(len(p.phys) for p in parts) <= 2
    assert [r.uniqKey for r in df.where(f"uniqKey = '{target}'").collect()] == [target]
    assert [r.body for r in df.where("keys = 'k5 all'").collect()] == [pulled[sent[5].msg_id].body]
    assert app.stop() == 0
    stopped = spark.read.format("rocketbox").option("path", app.cfg.root).option("topicPattern", "Spark.*").load()
    assert stopped.count() == 120                              # a stopped store reads the same


def test_several_appliances_stores_read_as_one_table_with_the_broker_name(appliance_factory, spark):
    """A cluster's stores (here two brokers' appliances) as one DataFrame: option ``paths``."""
    a = appliance_factory(namesrv=True, brokerName="broker-a").start()
    b = appliance_factory(namesrv=True, brokerName="broker-b").start()
    _send(a, "Many", 30)
    _send(b, "Many", 12)
    asyncio.run(read_topic(a, "Many"))                     # (dispatched)
    asyncio.run(read_topic(b, "Many"))
    df = spark.read.format("rocketbox").option("paths", f"broker-a={a.cfg.root},broker-b={b.cfg.root}") \
        .option("topic", "Many").load()
    counts = {r["brokerName"]: r["count"] for r in df.groupBy("brokerName").count().collect()}
    assert counts == {"broker-a": 30, "broker-b": 12}
    rows = df.where("brokerName = 'broker-b'").select("body", "brokerName").collect()
    assert sorted(r.body for r in rows) == sorted(b"body-%d-" % i + b"x" * (i % 50) for i in range(12))
    one = spark.read.format("rocketbox").option("path", a.cfg.root).option("topic", "Many").load()
    assert {r.brokerName for r in one.select("brokerName").collect()} == {""}     # one store: the option's, or ""
    with pytest.raises(Exception, match="BROKER=PATH"):
        spark.read.format("rocketbox").option("paths", a.cfg.root).option("topic", "Many").load().collect()


def test_errors_name_what_is_wrong(tmp_path, spark):
    from pyspark.errors import PySparkException
    with pytest.raises(Exception, match="not a RocketMQ store"):
        spark.read.format("rocketbox").option("path", str(tmp_path)).option("topic", "T").load().collect()
    with pytest.raises((PySparkException, Exception), match="option 'path' is required"):
        spark.read.format("rocketbox").option("topic", "T").load().collect()


def test_a_stream_picks_up_new_messages_and_a_restart_from_its_checkpoint_loses_and_repeats_nothing(
        appliance_factory, spark, tmp_path):
    import time
    app = appliance_factory(namesrv=True).start()
    sent = [r.msg_id for r in _send(app, "Streamed", 50)]
    out, cp = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def start():
        return spark.readStream.format("rocketbox").option("path", app.cfg.root).option("topic", "Streamed") \
            .option("startingOffsets", "earliest").option("maxRecordsPerTrigger", "30").load() \
            .select("uniqKey", "queueId", "queueOffset").writeStream.format("parquet").option("path", out) \
            .option("checkpointLocation", cp).trigger(processingTime="1 second").start()

    def seen() -> list:
        try:
            return [r.uniqKey for r in spark.read.parquet(out).collect()]
        except Exception:
            return []

    def until(n: int, timeout: float = 60) -> list:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = seen()
            if len(got) >= n:
                return got
            time.sleep(0.5)
        return seen()

    q = start()
    try:
        assert len(until(50)) == 50                               # in triggers of at most 30
        sent += [r.msg_id for r in _send(app, "Streamed", 20)]
        t0 = time.monotonic()
        assert len(until(70)) == 70
        picked_up = time.monotonic() - t0
    finally:
        q.stop()
    sent += [r.msg_id for r in _send(app, "Streamed", 25)]          # while the query is stopped
    q = start()
    try:
        got = until(95)
    finally:
        q.stop()
    assert sorted(got) == sorted(sent) and len(set(got)) == 95, (len(got), len(set(got)))
    assert picked_up < 10, picked_up
    assert app.stop() == 0


def test_a_dataframe_written_to_a_topic_is_read_back_by_a_consumer(appliance_factory, spark):
    app = appliance_factory(namesrv=True).start()
    _send(app, "Sunk", 1)                                          # the topic exists
    rows = [(b"row-%d" % i, f"T{i % 2}", f"key{i}", {"n": str(i)}) for i in range(300)]
    df = spark.createDataFrame(rows, "body binary, tags string, keys string, properties map<string,string>")
    df.repartition(3).write.format("rocketbox").option("namesrv", app.namesrv).option("topic", "Sunk") \
        .option("batchSize", "50").mode("append").save()
    got = [m for m in asyncio.run(read_topic(app, "Sunk")) if m.body.startswith(b"row-")]
    assert sorted(m.body for m in got) == sorted(r[0] for r in rows)
    by_body = {m.body: m for m in got}
    for body, tags, keys, props in rows[::37]:
        m = by_body[body]
        assert m.tags == tags and m.keys == [keys] and m.properties["n"] == props["n"]
    with pytest.raises(Exception, match="needs a 'body' column"):
        spark.createDataFrame([("x",)], "text string").write.format("rocketbox").option("namesrv", app.namesrv) \
            .option("topic", "Sunk").mode("append").save()
    assert app.stop() == 0


def test_the_jobs_audit_export_lag_and_search(appliance_factory, spark, tmp_path):
    import os
    import subprocess
    import sys

    from rocketbox.client.consumer import PullConsumer
    from rocketbox.spark.jobs import audit, export, lag, search
    app = appliance_factory(namesrv=True, mappedFileSizeCommitLog=str(256 * 1024), maxMessageSize="65536").start()
    sent = _send(app, "Jobs", 400)                       # in CommitLog files of 256 KiB

    async def consume_some():
        pc = await PullConsumer("lagging", app.namesrv).start()
        mq = (await pc.queues("Jobs"))[0]
        await pc.assign([mq])
        pc.seek(mq, 0)
        got = await pc.pull(mq, 10)
        pc.seek(mq, 10)
        await pc.commit(mq)
        await pc.shutdown()
        return mq.queue_id, len(got.messages)
    qid, pulled = asyncio.run(consume_some())
    assert pulled == 10
    assert app.stop() == 0
    root = app.cfg.root
    assert audit.audit(spark, root).count() == 0               # a clean store
    n = export.export(spark, root, str(tmp_path / "parquet"), topic="Jobs")
    back = spark.read.parquet(str(tmp_path / "parquet"))
    assert n == 400 and back.count() == 400 and {r.topic for r in back.select("topic").distinct().collect()} == {"Jobs"}
    assert os.listdir(tmp_path / "parquet" / "topic=Jobs")[0].startswith("date=")
    table = {(r.group, r.queueId): r for r in lag.lag(spark, root).collect()}
    row = table[("lagging", qid)]
    assert row.consumerOffset == 10 and row.lag == row.brokerOffset - 10 > 0
    found = search.search(spark, root, key="k123").collect()
    assert [r.uniqKey for r in found] == [sent[123].msg_id]
    # a byte flipped in the middle of the CommitLog: the audit names the file and the offset
    rows = spark.read.format("rocketbox").option("path", root).option("topic", "Jobs").load().collect()
    rec = sorted(rows, key=lambda r: r.physicalOffset)[len(rows) // 2]         # the middle of the CommitLog
    size = int(app.cfg.mappedFileSizeCommitLog)
    victim = os.path.join(app.cfg.commitlog_dir, f"{rec.physicalOffset - rec.physicalOffset % size:020d}")
    at = rec.physicalOffset % size
    with open(victim, "r+b") as f:
        f.seek(at + 90)                                          # inside its body (which starts at 88)
        b = f.read(1)
        f.seek(at + 90)
        f.write(bytes([b[0] ^ 0xFF]))
    problems = audit.audit(spark, root).collect()
    assert any(p.file == victim and p.offset == at and "commitlog" in p.kind for p in problems), problems
    # recovery after a crash makes it a tombstone: the source reads what a consumer reads, and the
    # audit lists the tombstone apart, with no problem left (#49)
    open(os.path.join(root, "abort"), "wb").close()
    with open(os.path.join(root, "checkpoint"), "r+b") as f:
        f.write(bytes(40))                                      # the abnormal scan starts at the first file
    from rocketbox.appliance.inprocess import running_store
    from rocketbox.spark.storefiles import Store, read_batches  # (what each of the source's tasks reads)
    with running_store(app.cfg):                                # (recovery, in this process)
        pass
    phys = [p for q in Store(root).queues("Jobs")
            for b in read_batches(root, "Jobs", q, *Store(root).bounds("Jobs", q), names=("physicalOffset",))
            for p in b.column("physicalOffset").to_pylist()]
    assert len(phys) == 399 and rec.physicalOffset not in phys
    problems, tombstones = audit.report(spark, root)
    assert problems.count() == 0
    assert [(t.file, t.offset, t.topic) for t in tombstones.collect()] == [(victim, at, "Jobs")]
    out = subprocess.run([sys.executable, "-m", "rocketbox.appliance", "spark", "lag", "-c", app.conf, "--png",
                          str(tmp_path / "lag.png")], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "lagging" in out.stdout and open(tmp_path / "lag.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_store_written_by_the_real_rocketmq_broker_reads_as_its_consumers_see_it(spark, java_classes, tmp_path):
    """The real Apache RocketMQ 4.9.8 broker stores messages our producer sends it; a consumer
    pulls them through that broker; after it stops, Spark reads its store files and gets the same
    messages, field by field."""
    import shutil

    from bench.e2e import ROCKETMQ_HOME, RocketMQServer
    from tests.integration import harness
    port = next(harness._ports) + 10              # the broker's port - 2 and + 1 too; its name server + 50:
    next(harness._ports)                          # the next block, kept from other appliances
    server = RocketMQServer("ASYNC_FLUSH", str(tmp_path), port, ROCKETMQ_HOME).start()
    namesrv = f"127.0.0.1:{port + 50}"
    try:
        async def produce_and_pull():
            async with Producer("spark-rmq-pg", namesrv) as p:
                for i in range(60):
                    await p.send(Message("RmqWritten", b"rmq-%d" % i, tags=f"T{i % 2}", keys=[f"k{i}"],
                                         properties={"n": str(i)}))
            return await harness.pull_all(namesrv, "RmqWritten", group="spark-rmq-audit")
        pulled = {m.offset_msg_id: m for m in asyncio.run(produce_and_pull())}
    finally:
        procs, server.procs = server.procs, []
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(60)
    store = tmp_path / "copy"
    shutil.copytree(os.path.join(server.dir, "store"), store)
    server.stop()
    rows = spark.read.format("rocketbox").option("path", str(store)).option("topic", "RmqWritten").load().collect()
    assert len(rows) == len(pulled) == 60
    for r in rows:
        m = pulled[r.msgId]
        assert (r.queueId, r.queueOffset, r.body, r.tags, r.uniqKey) == (m.queue_id, m.queue_offset, m.body,
                                                                        m.properties["TAGS"], m.msg_id)
        assert int(r.storeTimestamp.timestamp() * 1000) == m.store_timestamp and r.physicalOffset == m.commit_log_offset
        assert dict(r.properties) == {k: v for k, v in m.properties.items() if k not in ("MIN_OFFSET", "MAX_OFFSET")}


def test_any_session_finds_the_source_by_itself(tmp_path):
    """pyspark's lookup of ``pyspark_*`` modules registers ``rocketbox`` in a session nobody
    registered it with (a plain SparkSession, in a process of its own)."""
    import subprocess
    import sys
    script = tmp_path / "plain.py"
    script.write_text(
        "import os, sys\n"
        "os.environ['PYSPARK_PYTHON'] = sys.executable\n"
        "from pyspark.sql import SparkSession\n"
        "s = SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false').getOrCreate()\n"
        "try:\n"
        "    s.read.format('rocketbox').option('path', sys.argv[1]).option('topic', 'T').load().collect()\n"
        "except Exception as e:\n"
        "    print('ERROR', str(e)[:3000])\n"
        "s.stop()\n")
    out = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=240)
    assert "not a RocketMQ store" in out.stdout, (out.stdout[-1000:], out.stderr[-2000:])   # the source ran


def test_a_stream_written_back_to_another_topic_arrives_there(appliance_factory, spark, tmp_path):
    import time
    app = appliance_factory(namesrv=True).start()
    from tests.integration.harness import create_topic
    create_topic(app, "Dest", 4)
    sent = _send(app, "Source", 30)
    q = spark.readStream.format("rocketbox").option("path", app.cfg.root).option("topic", "Source") \
        .option("startingOffsets", "earliest").load().select("body", "tags") \
        .writeStream.format("rocketbox").option("namesrv", app.namesrv).option("topic", "Dest") \
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="1 second").start()
    try:
        deadline, got = time.monotonic() + 60, []
        while time.monotonic() < deadline:
            got = [m for m in asyncio.run(read_topic(app, "Dest")) if m.body.startswith(b"body-")]
            if len(got) >= 30:
                break
            time.sleep(1)
    finally:
        q.stop()
    assert sorted(m.body for m in got) == sorted(b"body-%d-" % i + b"x" * (i % 50) for i in range(30))
    assert {m.tags for m in got} == {"T0", "T1", "T2"} and len(sent) == 30
    assert app.stop() == 0
