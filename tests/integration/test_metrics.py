"""The metrics role in a whole appliance (#54): /metrics scraped over HTTP while our clients produce
and consume, and by a real Prometheus (Debian's) while the Java 4.9.8 client does; the counts are
the messages sent and consumed, lag goes up and back to 0, `promtool check metrics` takes the
output, every role is reported up with its CPU and memory, and a bad request gets its 4xx."""
from __future__ import annotations

import asyncio
import collections
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from rocketbox.client.message import Message
from tests.integration import javaclient
from tests.integration.harness import create_topic, dispatched, wait_route
from tests.integration.test_clients import consumer, make_topic
from tests.unit.metrics.test_collect import parse, value
from tests.unit.metrics.test_dashboard import queries as dashboard_queries


def scrape(app) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{app.cfg.metricsPort}/metrics", timeout=10) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return parse(r.read().decode())


def test_a_scrape_counts_what_was_sent_and_consumed_lag_comes_back_to_zero_and_bad_requests_get_4xx(
        appliance_factory):
    app = appliance_factory(namesrv=True).start()
    seen: collections.Counter = collections.Counter()

    async def run():
        p = await make_topic(app, "Metered")                              # stores b"init"
        for i in range(60):
            await p.send(Message("Metered", b"m-%d" % i))
        await p.send_batch([Message("Metered", b"b-%d" % i) for i in range(40)])
        await dispatched(app)
        before = scrape(app)
        c = consumer(app, "metered-group", "Metered", seen)
        await c.start()
        deadline = time.monotonic() + 30
        while sum(seen.values()) < 101 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        after = None
        while time.monotonic() < deadline:       # until the commits are in (and a reader's tick has counted
            after = scrape(app)                   # what its first pulls found before the group's first commit)
            labels = {"topic": "Metered", "consumer_group": "metered-group"}
            if value(after, "rocketmq_consumer_lag_messages", **labels) == 0 and \
                    value(after, "rocketmq_messages_out_total", **labels) >= 101:
                break
            await asyncio.sleep(0.5)
        await c.shutdown()
        await p.shutdown()
        return before, after

    before, after = asyncio.run(run())
    assert sum(seen.values()) == 101
    assert value(before, "rocketmq_messages_in_total", topic="Metered", node_id="b1") == 101
    assert not [k for k in before if k[0] == "rocketmq_messages_out_total" and ("topic", "Metered") in k[1]]
    assert value(after, "rocketmq_messages_in_total", topic="Metered") == 101
    assert value(after, "rocketmq_messages_out_total", topic="Metered", consumer_group="metered-group") == 101
    assert value(after, "rocketmq_consumer_lag_messages", topic="Metered", consumer_group="metered-group") == 0
    assert value(after, "rocketmq_consumer_connections", consumer_group="metered-group") == 1
    assert value(after, "rocketbox_client_connections", of="open") >= 2          # the producer's, the consumer's
    assert value(after, "rocketbox_client_connections", of="limit") > 100
    assert value(after, "rocketbox_client_connections_refused_total") == 0
    for role in ("writer", "dispatcher", "flusher", "reader-0", "reader-1", "haproxy"):
        assert value(after, "rocketbox_role_up", role=role) == 1
        assert value(after, "rocketbox_role_memory_bytes", role=role) > 5 * 2**20
    assert value(after, "rocketbox_dispatch_lag_bytes") == 0
    _bad_requests_get_their_error(app)
    with socket.create_connection(("127.0.0.1", app.cfg.metricsPort), timeout=10):   # idle as the role stops
        time.sleep(0.3)
        assert app.stop() == 0
    assert not [line for line in app.log_text().splitlines() if "metrics[" in line and " ERROR " in line], \
        app.log_text()[-3000:]


def _bad_requests_get_their_error(app) -> None:
    """Not a scrape: its 4xx, and the role goes on serving."""
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{app.cfg.metricsPort}/nope", timeout=10)
        raise AssertionError("answered 200")
    except urllib.error.HTTPError as e:
        assert e.code == 404
    with socket.create_connection(("127.0.0.1", app.cfg.metricsPort), timeout=10) as s:
        s.sendall(b"GET /" + b"x" * 9000 + b" HTTP/1.1\r\n\r\n")                 # a head over 8 KiB
        assert s.recv(100).startswith(b"HTTP/1.1 431 ")
    with socket.create_connection(("127.0.0.1", app.cfg.metricsPort), timeout=10) as s:
        s.sendall(b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03 tls hello\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 400 ")
    assert value(scrape(app), "rocketbox_role_up", role="writer") == 1            # still serving


def _prometheus(app, tmp_path) -> tuple[subprocess.Popen, str]:
    """A real Prometheus scraping the appliance's metrics role every second -> (process, its API's base)."""
    port = app.cfg.listenPort + 32
    conf = tmp_path / "prometheus.yml"
    conf.write_text("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                    "scrape_configs:\n  - job_name: rocketbox\n"
                    f"    static_configs: [{{targets: ['127.0.0.1:{app.cfg.metricsPort}']}}]\n")
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen(["prometheus", f"--config.file={conf}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def _query(base: str, promql: str) -> float | None:
    """The one value of an instant query, or None when it has none (yet)."""
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            result = json.load(r)["data"]["result"]
    except (OSError, ValueError, KeyError):
        return None
    return float(result[0]["value"][1]) if len(result) == 1 else None


def _until(base: str, promql: str, ok, timeout: float = 30) -> float | None:
    deadline, got = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        got = _query(base, promql)
        if got is not None and ok(got):
            return got
        time.sleep(0.5)
    return got


@pytest.mark.skipif(shutil.which("prometheus") is None or shutil.which("promtool") is None,
                    reason="no prometheus/promtool: ./install.sh --dev installs Debian's")
def test_prometheus_scrapes_what_the_java_client_sent_and_consumed(appliance_factory, java_classes, tmp_path):
    app = appliance_factory(namesrv=True).start()
    create_topic(app, "JavaMetered", 4)
    wait_route(app, "JavaMetered")
    prom, base = _prometheus(app, tmp_path)
    try:
        assert _until(base, 'up{job="rocketbox"}', lambda v: v == 1) == 1, "Prometheus never scraped the role"
        out = javaclient.run(java_classes, "MeteredRoundTrip", app.namesrv, "JavaMetered", "java-metered", "300",
                             "2000", logs=str(tmp_path / "java-logs"), timeout=120)
        assert "sent=300" in out and "consumed=300" in out, out
        labels = 'topic="JavaMetered",consumer_group="java-metered"'
        sent = _until(base, 'rocketmq_messages_in_total{topic="JavaMetered"}', lambda v: v >= 301)
        taken = _until(base, f"rocketmq_messages_out_total{{{labels}}}", lambda v: v >= 301)
        assert sent is not None and abs(sent - 301) <= 15, sent           # within 5% (the 300 and the first one)
        assert taken is not None and abs(taken - 301) <= 15, taken
        assert _until(base, f"rocketmq_consumer_lag_messages{{{labels}}}", lambda v: v == 0) == 0
        peak = _query(base, f"max_over_time(rocketmq_consumer_lag_messages{{{labels}}}[5m])")
        assert peak == 300                        # while the Java client held the 300 back, and back to 0 since
        # how long the oldest unconsumed message waited: about the 2 s it was held back, then 0
        waited = _query(base, f"max_over_time(rocketmq_consumer_lag_latency{{{labels}}}[5m])")
        assert waited is not None and 1000 <= waited <= 60_000, waited
        assert _until(base, f"rocketmq_consumer_lag_latency{{{labels}}}", lambda v: v == 0) == 0
        rate = _query(base, 'max_over_time(rate(rocketmq_messages_in_total{topic="JavaMetered"}[5s])[5m:1s])')
        assert rate is not None and rate > 0                                           # it was graphed going up
        # the histograms: every record put counted once, a put latency quantile, a producer seen
        assert (_query(base, "sum(rocketbox_put_latency_seconds_count)") or 0) >= 301
        assert (_query(base, "sum(rocketbox_ring_wait_seconds_count)") or 0) >= 301
        assert (_query(base, "sum(rocketmq_message_size_count)") or 0) >= 301
        p99 = _query(base, "histogram_quantile(0.99, sum by (le) (rate(rocketbox_put_latency_seconds_bucket[5m])))")
        assert p99 is not None and 0 < p99 < 10, p99
        assert (_query(base, 'sum(rocketmq_throughput_in_total{topic="JavaMetered"})') or 0) > 301 * 100
        assert (_query(base, "max_over_time(sum(rocketmq_producer_connections)[5m:1s])") or 0) >= 1
        for expr in dashboard_queries():                  # the Grafana dashboard's queries: each one parses,
            q = expr.replace("$cluster", ".*").replace("$broker", ".*")   # and most have data by now
            with urllib.request.urlopen(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': q})}", timeout=10) as r:
                assert json.load(r)["status"] == "success", expr
        with urllib.request.urlopen(f"http://127.0.0.1:{app.cfg.metricsPort}/metrics", timeout=10) as r:
            text = r.read()
        check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=30)
        assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()
    finally:
        prom.terminate()
        prom.wait(10)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="no tmux: ./install.sh --dev installs it")
def test_appliance_top_shows_a_running_load_and_quits_on_q(appliance_factory, tmp_path):
    import sys
    import threading

    from tests.integration.harness import ROOT
    app = appliance_factory(namesrv=True).start()
    stop = threading.Event()
    sent = [0]

    def load():
        async def run():
            p = await make_topic(app, "LiveTop")
            while not stop.is_set():
                await p.send(Message("LiveTop", b"x" * 100))
                sent[0] += 1
            await p.shutdown()
        asyncio.run(run())

    producer = threading.Thread(target=load, daemon=True)
    producer.start()
    session = f"rbxtop-{os.getpid()}-{app.cfg.listenPort}"
    env = {"TERM": "xterm-256color"}
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "150", "-y", "45",
                    f"cd {ROOT} && {sys.executable} -m rocketbox.appliance top -c {app.conf}"],
                   check=True, env={**os.environ, **env}, timeout=10)
    try:
        deadline, screen = time.monotonic() + 20, ""
        while time.monotonic() < deadline:
            time.sleep(1)
            screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True,
                                    text=True, timeout=10).stdout
            row = next((line.split() for line in screen.splitlines() if line.startswith("LiveTop")), None)
            if row and int(row[1].replace(",", "")) > 0:
                break
        assert screen.startswith("rocketbox top: broker b1"), screen
        assert row is not None and int(row[1].replace(",", "")) > 0, screen          # its rate, live
        assert any(line.split()[:2] == ["writer", "up"] for line in screen.splitlines()), screen
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True, timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and subprocess.run(["tmux", "has-session", "-t", session],
                                                             capture_output=True).returncode == 0:
            time.sleep(0.2)
        assert subprocess.run(["tmux", "has-session", "-t", session], capture_output=True).returncode != 0, \
            "top did not quit on q"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        stop.set()
        producer.join(20)
    assert sent[0] > 0
