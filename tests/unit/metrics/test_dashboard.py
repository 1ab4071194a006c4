"""The Grafana dashboard (metrics/grafana/rocketbox.json) graphs only what the metrics role serves:
every name its queries use is one a scrape of a real segment holds; panels do not overlap; the
data source is the one the import asks for.  (The queries' PromQL is checked against a real
Prometheus in tests/integration/test_metrics.py.)"""
from __future__ import annotations

import json
import os
import re

from rocketbox.metrics.collect import Collector
from rocketbox.shm.state import SharedState
from tests.unit.writer.rig import small_config

DASHBOARD = os.path.join(os.path.dirname(__file__), "..", "..", "..", "metrics", "grafana", "rocketbox.json")


def dashboard() -> dict:
    with open(DASHBOARD, encoding="utf-8") as f:
        return json.load(f)


def queries() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]


def test_every_name_the_dashboard_queries_is_one_a_scrape_holds(tmp_path):
    cfg = small_config(tmp_path / "store", "dash")
    sh = SharedState(cfg.geometry()).create()
    try:
        served = {f.name for f in Collector(cfg, sh, ["writer"]).families()}
    finally:
        sh.close()
        sh.unlink()
    used = {re.sub(r"_(bucket|sum|count)$", "", name) if re.sub(r"_(bucket|sum|count)$", "", name) in served else name
            for q in queries() for name in re.findall(r"\b(?:rocketmq|rocketbox)_[a-z_]+", q)}
    assert used and used <= served, used - served
    assert {"rocketmq_messages_in_total", "rocketmq_messages_out_total", "rocketmq_consumer_lag_messages",
            "rocketbox_disk_used_ratio", "rocketbox_role_cpu_seconds_total", "rocketbox_put_latency_seconds",
            "rocketbox_flush_latency_seconds", "rocketmq_message_size"} <= used


def test_panels_do_not_overlap_and_use_the_imported_data_source():
    d = dashboard()
    assert d["__inputs"][0]["name"] == "DS_PROMETHEUS"
    cells = set()
    for p in d["panels"]:
        assert p["datasource"]["uid"] == "${DS_PROMETHEUS}" and p["targets"], p["title"]
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, p["title"]
        cells |= mine
