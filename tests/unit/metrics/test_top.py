"""``appliance top``'s screen (metrics/top.py) from two scrapes a second apart: rates, lags,
roles, tables, each on its line."""
from __future__ import annotations

from rocketbox.metrics.exposition import Family
from rocketbox.metrics.top import samples, screen


def _scrape(msgs_in: int, msgs_out: int, writer_cpu: float) -> dict:
    return samples([
        Family("rocketmq_messages_in_total", "counter", "h").add(msgs_in, topic="Orders").add(7, topic="Idle"),
        Family("rocketmq_messages_out_total", "counter", "h").add(msgs_out, topic="Orders", consumer_group="g1"),
        Family("rocketmq_consumer_lag_messages", "gauge", "h").add(msgs_in - msgs_out, topic="Orders",
                                                                   consumer_group="g1"),
        Family("rocketmq_consumer_connections", "gauge", "h").add(2, consumer_group="g1"),
        Family("rocketbox_dispatch_lag_bytes", "gauge", "h").add(2048),
        Family("rocketbox_flush_lag_bytes", "gauge", "h").add(0),
        Family("rocketbox_sends_refused", "gauge", "h").add(0),
        Family("rocketbox_client_connections", "gauge", "h").add(3, of="open").add(1900, of="limit"),
        Family("rocketbox_disk_used_ratio", "gauge", "h").add(0.25, partition="commitlog").add(-1.0, partition="index"),
        Family("rocketbox_disk_limit_ratio", "gauge", "h").add(0.9, limit="warning").add(0.75, limit="retention"),
        Family("rocketbox_role_up", "gauge", "h").add(1, role="writer").add(0, role="dispatcher"),
        Family("rocketbox_role_cpu_seconds_total", "counter", "h").add(writer_cpu, role="writer"),
        Family("rocketbox_role_memory_bytes", "gauge", "h").add(30 * 2**20, role="writer"),
        Family("rocketbox_table_entries", "gauge", "h").add(3, table="topics", of="used").add(100, table="topics",
                                                                                               of="capacity"),
        Family("rocketbox_put_latency_seconds", "histogram", "h", buckets=(0.001,)).add(([msgs_in, 0], msgs_in * 0.0005)),
        Family("rocketbox_ring_wait_seconds", "histogram", "h", buckets=(0.001,)).add(([msgs_in, 0], msgs_in * 0.0001)),
        Family("rocketbox_commit_records", "histogram", "h", buckets=(8,)).add(([msgs_in // 4, 0], msgs_in)),
        Family("rocketbox_flush_latency_seconds", "histogram", "h", buckets=(0.001,)).add(([0, 0], 0.0)),
        Family("rocketbox_ring_bytes", "gauge", "h").add(4096, owner="reader-0", ring="request", of="used")
                                                    .add(2**20, owner="reader-0", ring="request", of="capacity"),
    ])


def test_the_screen_shows_rates_lags_roles_and_tables():
    lines = screen(_scrape(1000, 900, 10.0), _scrape(3000, 2400, 10.5), 2.0, "rocketbox top: broker b", width=200)
    text = "\n".join(lines)
    assert lines[0].startswith("rocketbox top: broker b")
    assert "messages in 1,000/s   out 750/s   dispatch lag 2.0 KiB   flush lag 0 B   sends refused: no   clients 3 of " \
        "1,900" in text
    assert "disk used: commitlog 25.0%  index ?   (sends refused above 90%, retention above 75%)" in text
    # 2,000 records in 500 commits over the refresh, each 0.5 ms; no flush then
    assert "ring wait 0.10 ms   put latency 0.50 ms   flush -   group commit 4.0 records" in text
    assert "rings: reader-0 req 4.0 KiB/1.0 MiB" in text
    writer = next(line for line in lines if line.startswith("writer"))
    assert writer.split() == ["writer", "up", "25.0", "30.0", "MiB"]
    assert next(line for line in lines if line.startswith("dispatcher")).split()[:2] == ["dispatcher", "DOWN"]
    topics = [line.split() for line in lines if line.startswith(("Orders", "Idle"))]
    assert topics == [["Orders", "1,000", "3,000"], ["Idle", "0", "7"]]             # busiest first
    group = next(line for line in lines if line.startswith("g1")).split()
    assert group == ["g1", "Orders", "750", "600", "2"]
    assert lines[-1] == "tables: topics 3/100"


def test_the_first_screen_has_no_rates_and_lines_fit_the_width():
    cur = _scrape(10, 5, 1.0)
    lines = screen({}, cur, 0.0, "t" * 300, width=60)
    assert all(len(line) <= 60 for line in lines)
    assert "messages in 0/s   out 0/s" in "\n".join(lines)
