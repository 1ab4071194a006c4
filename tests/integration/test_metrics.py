"""The metrics role in a whole appliance (#54): /metrics scraped over HTTP while our clients produce
and consume; the counts are the messages sent and consumed, lag goes up and back to 0, every
role is reported up with its CPU and memory, and a bad request gets its 4xx."""
from __future__ import annotations

import asyncio
import collections
import socket
import time
import urllib.error
import urllib.request

from rocketbox.client.message import Message
from tests.integration.harness import dispatched
from tests.integration.test_clients import consumer, make_topic
from tests.unit.metrics.test_collect import parse, value


def scrape(app) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{app.cfg.metricsPort}/metrics", timeout=10) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return parse(r.read().decode())


def test_a_scrape_counts_what_was_sent_and_consumed_and_lag_comes_back_to_zero(appliance_factory):
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
    for role in ("writer", "dispatcher", "flusher", "reader-0", "reader-1", "haproxy"):
        assert value(after, "rocketbox_role_up", role=role) == 1
        assert value(after, "rocketbox_role_memory_bytes", role=role) > 5 * 2**20
    assert value(after, "rocketbox_dispatch_lag_bytes") == 0


def test_a_request_that_is_not_a_scrape_gets_its_error_and_the_role_goes_on(appliance_factory):
    app = appliance_factory().start()
    base = f"http://127.0.0.1:{app.cfg.metricsPort}"
    for path, code in (("/nope", 404),):
        try:
            urllib.request.urlopen(base + path, timeout=10)
            raise AssertionError("answered 200")
        except urllib.error.HTTPError as e:
            assert e.code == code
    with socket.create_connection(("127.0.0.1", app.cfg.metricsPort), timeout=10) as s:
        s.sendall(b"GET /" + b"x" * 9000 + b" HTTP/1.1\r\n\r\n")                 # a head over 8 KiB
        assert s.recv(100).startswith(b"HTTP/1.1 431 ")
    with socket.create_connection(("127.0.0.1", app.cfg.metricsPort), timeout=10) as s:
        s.sendall(b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03 tls hello\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 400 ")
    assert value(scrape(app), "rocketbox_role_up", role="writer") == 1            # still serving
