"""What a scrape reads from a real shared segment (metrics/collect.py): messages in per topic,
messages out and lag per (topic, group), members, the store's offsets and disk, each role's
process; every sample checked by value."""
from __future__ import annotations

import os
import re

from rocketbox.metrics.collect import Collector
from rocketbox.metrics.exposition import render
from rocketbox.shm.histogram import Histogram
from rocketbox.shm.layout import C, H, S
from rocketbox.shm.roster import Roster
from rocketbox.shm.state import SharedState
from rocketbox.store import quarantine
from tests.unit.writer.rig import small_config

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> dict[tuple[str, frozenset], float]:
    """Prometheus text -> {(name, labels): value}; every line a comment or a well-formed sample."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* \S", line), line
            continue
        m = _SAMPLE.match(line)
        assert m, line
        labels = frozenset(_LABEL.findall(m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels include ``labels``."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def test_a_scrape_reads_topics_groups_members_and_the_store(tmp_path):
    cfg = small_config(tmp_path / "store", "mx")
    sh = SharedState(cfg.geometry()).create()
    try:
        v, ctl = sh.views, sh.control
        for i, (topic, qid, count) in enumerate([("Orders", 0, 10), ("Orders", 1, 5), ("%RETRY%g1", 0, 2),
                                                 ("SCHEDULE_TOPIC_XXXX", 2, 7)]):
            v["queue_names"][i], v["queue_ids"][i], v["queue_max"][i] = topic.encode(), qid, count
        ctl[C.QUEUE_COUNT], ctl[C.TOPIC_COUNT] = 4, 3
        for i, (key, qid, committed) in enumerate([("Orders@g1", 0, 8), ("Orders@g1", 1, 5), ("Orders@g2", 0, 0)]):
            v["offset_keys"][i], v["offset_qids"][i], v["offset_values"][i] = key.encode(), qid, committed
        ctl[C.OFFSET_COUNT] = 3
        v["offset_pulls"][0, 0], v["offset_pulls"][1, 0], v["offset_pulls"][1, 1] = 6, 2, 5   # two readers' rows
        v["clients"][0, 0] = (b"g1", b"c1", 1)
        v["clients"][1, 3] = (b"g1", b"c2", 1)
        v["clients"][1, 4] = (b"g3", b"c3", 1)
        ctl[C.WRITTEN], ctl[C.DISPATCHED], ctl[C.FLUSHED], ctl[C.DISK_CL_PPM] = 5000, 4000, 3000, 250_000
        sh.slots[0, S.PULLS_FOUND], sh.slots[1, S.PULLS_MISSED] = 3, 4
        os.makedirs(cfg.run_dir, exist_ok=True)
        with open(os.path.join(cfg.run_dir, "writer.pid"), "w") as f:
            f.write(f"{os.getpid()}\n")                       # this process stands for the writer

        samples = parse(render(Collector(cfg, sh, ["writer", "dispatcher"]).families()).decode())

        assert value(samples, "rocketmq_messages_in_total", topic="Orders", is_system="false") == 15
        assert value(samples, "rocketmq_messages_in_total", topic="SCHEDULE_TOPIC_XXXX", is_system="true") == 7
        assert value(samples, "rocketmq_messages_out_total", topic="Orders", consumer_group="g1") == 13
        assert value(samples, "rocketmq_consumer_lag_messages", topic="Orders", consumer_group="g1") == 2
        # g2 committed on queue 0 only: queue 1 counts from 0, as GET_CONSUME_STATS has it
        assert value(samples, "rocketmq_consumer_lag_messages", topic="Orders", consumer_group="g2") == 15
        assert value(samples, "rocketmq_consumer_connections", consumer_group="g1") == 2
        assert value(samples, "rocketmq_consumer_group_number") == 3           # g1, g2 (offsets), g3 (members)
        assert value(samples, "rocketmq_topic_number", cluster=cfg.brokerClusterName, node_id=cfg.brokerName) == 3
        assert value(samples, "rocketbox_dispatch_lag_bytes") == 1000
        assert value(samples, "rocketbox_flush_lag_bytes") == 2000
        assert value(samples, "rocketbox_disk_used_ratio", partition="commitlog") == 0.25
        assert value(samples, "rocketbox_pulls_total", result="missed") == 4
        assert value(samples, "rocketbox_role_up", role="writer") == 1
        assert value(samples, "rocketbox_role_up", role="dispatcher") == 0           # no pid file: not running
        assert value(samples, "rocketbox_role_memory_bytes", role="writer") > 10 * 2**20
        assert value(samples, "rocketbox_table_entries", table="queues", of="used") == 4
    finally:
        sh.close()
        sh.unlink()


def test_a_scrape_reads_histograms_rings_the_scheduler_and_producers(tmp_path):
    cfg = small_config(tmp_path / "store", "mh")
    sh = SharedState(cfg.geometry()).create()
    try:
        v, ctl = sh.views, sh.control
        for i, (topic, qid, count, size) in enumerate([("Orders", 0, 3, 600), ("%DLQ%g1", 0, 2, 400),
                                                       ("SCHEDULE_TOPIC_XXXX", 2, 9, 0)]):
            v["queue_names"][i], v["queue_ids"][i], v["queue_max"][i], v["queue_bytes"][i] = topic.encode(), qid, count, size
        ctl[C.QUEUE_COUNT] = 3
        Histogram(v, H.PUT_LATENCY).observe(700, 3)                  # 3 records, 0.7 ms each
        Histogram(v, H.MESSAGE_SIZE).observe_many([100, 2000, 5_000_000])
        ctl[C.WRITTEN], ctl[C.DISPATCHED], ctl[C.WRITTEN_TS], ctl[C.DISPATCHED_TS] = 900, 800, 10_500, 10_000
        sh.slots[2, S.OWNER_PID], sh.slots[2, S.PULLED_BYTES] = os.getpid(), 1234
        assert sh.request_rings[2].try_push(1, [b"x" * 40])
        os.makedirs(cfg.config_dir, exist_ok=True)
        with open(os.path.join(cfg.config_dir, "delayOffset.json"), "w") as f:
            f.write('{"offsetTable":{3:4,1:0}}')
        with open(os.path.join(cfg.config_dir, "timerCheckpoint.json"), "w") as f:
            f.write('{"pending": 5, "nextDueMs": 1700000000000}')
        Roster(sh.roster_dir, 2).publish({"pid": os.getpid(), "port": 1, "consumers": {}, "producers": {
            "P1": [{"clientId": "a", "language": "JAVA", "version": 409}],
            "CLIENT_INNER_PRODUCER": [{"clientId": "a", "language": "JAVA", "version": 409},
                                      {"clientId": "b", "language": "CPP", "version": 409}]}})

        ctl[C.RETENTION_FILES], ctl[C.RETENTION_FORCED] = 3, 1
        for offset in (4096, 8192):
            quarantine.note(cfg.root, "reader-slot2", {"offset": offset, "length": 100, "foundBy": "reader-slot2"}, b"x")

        text = render(Collector(cfg, sh, []).families()).decode()
        samples = parse(text)

        assert value(samples, "rocketmq_throughput_in_total", topic="Orders") == 600
        assert value(samples, "rocketmq_throughput_out_total") == 1234
        assert value(samples, "rocketmq_send_to_dlq_messages_total", consumer_group="g1") == 2
        assert value(samples, "rocketbox_put_latency_seconds_bucket", le="0.0005") == 0
        assert value(samples, "rocketbox_put_latency_seconds_bucket", le="0.001") == 3
        assert value(samples, "rocketbox_put_latency_seconds_count") == 3
        assert abs(value(samples, "rocketbox_put_latency_seconds_sum") - 0.0021) < 1e-9
        assert value(samples, "rocketmq_message_size_bucket", le="1024.0") == 1
        assert value(samples, "rocketmq_message_size_bucket", le="4096.0") == 2
        assert value(samples, "rocketmq_message_size_bucket", le="4194304.0") == 2
        assert value(samples, "rocketmq_message_size_bucket", le="+Inf") == 3
        assert value(samples, "rocketmq_message_size_sum") == 5_002_100
        assert value(samples, "rocketbox_flush_latency_seconds_count") == 0
        assert value(samples, "rocketbox_dispatch_lag_seconds") == 0.5
        assert value(samples, "rocketbox_ring_bytes", slot="2", ring="request", of="used") == 48   # 8-byte head + 40
        assert value(samples, "rocketbox_ring_bytes", slot="2", ring="response", of="used") == 0
        assert value(samples, "rocketbox_delay_backlog_messages", level="3") == 5     # 9 stored, 4 delivered
        assert value(samples, "rocketbox_delay_backlog_messages", level="1") == 0
        assert value(samples, "rocketbox_timers_pending") == 5
        assert value(samples, "rocketbox_timer_next_due_timestamp_seconds") == 1_700_000_000
        assert value(samples, "rocketmq_producer_connections", language="JAVA") == 1      # "a" once, in two groups
        assert value(samples, "rocketmq_producer_connections", language="CPP") == 1
        assert value(samples, "rocketbox_retention_deleted_files_total", why="expired") == 2
        assert value(samples, "rocketbox_retention_deleted_files_total", why="disk_full") == 1
        assert value(samples, "rocketbox_quarantined_records", found_by="reader-slot2") == 2
    finally:
        sh.close()
        sh.unlink()
