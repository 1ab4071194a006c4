"""RocketMQ 5.x's clients for the gRPC front's tests: the official Python client
(``rocketmq-python-client``, run from ``<venv>/rocketmq5`` as its own process, ``run_5x``: its
package name is the 4.x C++ client's too; the scripts are in ``grpc5/``), and the protocol's calls
made by hand (``Raw``) for what the official clients never send."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from rocketbox.grpcfront import v2
from rocketbox.remoting.codes import RequestCode as R
from tests.integration.harness import ROOT
from tests.integration.wire import Wire

PROTOCOL_DIR = v2.default_dir()


def run_5x(script: str, *args: str, timeout: float = 60) -> list[str]:
    env = dict(os.environ, PYTHONPATH=PROTOCOL_DIR)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "integration", "grpc5", script), *args],
                       env=env, capture_output=True, text=True, timeout=timeout, cwd="/tmp")
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    return p.stdout.splitlines()


NEEDS_5X = pytest.mark.skipif(not os.path.isdir(os.path.join(PROTOCOL_DIR, "rocketmq", "v5")),
                              reason="rocketmq-python-client is not installed in <venv>/rocketmq5: ./install.sh installs it")


def make_group(app, group: str, **config) -> None:
    """As ``mqadmin updateSubGroup`` does (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP), then until the
    broker's groups have it as sent."""
    w = Wire("127.0.0.1", app.cfg.listenPort)
    try:
        assert w.call(R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, json.dumps({"groupName": group, **config}).encode()).code == 0
        deadline = time.monotonic() + 10
        while True:
            table = json.loads(w.call(R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body)["subscriptionGroupTable"]
            if all(table.get(group, {}).get(k) == v for k, v in config.items()):
                return
            assert time.monotonic() < deadline, table
            time.sleep(0.1)
    finally:
        w.close()


class Raw:
    """The 5.x protocol's calls, made by hand (``grpc``), for what the official clients never send."""

    def __init__(self, port: int):
        import grpc
        self.proto = v2.load()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")

    def call(self, method: str, request, response):
        return self.channel.unary_unary(f"/{v2.SERVICE}/{method}", request_serializer=lambda r: r if isinstance(r, bytes)
                                        else r.SerializeToString(), response_deserializer=response.FromString)(request, timeout=10)

    def receive(self, group: str, topic: str, invisible_ms: int = 30_000, poll_ms: int = 0, sql: str | None = None,
                batch: int = 4, queue: int = -1) -> list:
        p = self.proto
        req = p.ReceiveMessageRequest(batch_size=batch)
        req.group.name, req.message_queue.topic.name, req.message_queue.id = group, topic, queue
        req.invisible_duration.FromMilliseconds(invisible_ms)
        req.long_polling_timeout.FromMilliseconds(poll_ms)
        if sql is not None:
            req.filter_expression.type, req.filter_expression.expression = p.enum("FilterType", "SQL"), sql
        stream = self.channel.unary_stream(f"/{v2.SERVICE}/ReceiveMessage", request_serializer=lambda r: r.SerializeToString(),
                                           response_deserializer=p.ReceiveMessageResponse.FromString)
        return list(stream(req, timeout=poll_ms / 1000 + 10))

    def ack(self, group: str, topic: str, *handles: str):
        req = self.proto.AckMessageRequest()
        req.group.name, req.topic.name = group, topic
        for h in handles:
            req.entries.add(message_id="X", receipt_handle=h)
        return self.call("AckMessage", req, self.proto.AckMessageResponse)

    def change(self, group: str, topic: str, handle: str, ms: int):
        req = self.proto.ChangeInvisibleDurationRequest(receipt_handle=handle)
        req.group.name, req.topic.name = group, topic
        req.invisible_duration.FromMilliseconds(ms)
        return self.call("ChangeInvisibleDuration", req, self.proto.ChangeInvisibleDurationResponse)

    def close(self) -> None:
        self.channel.close()
