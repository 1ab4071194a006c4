"""A real client written elsewhere, in another language: the Node package ``ali-ons`` 3.12.0
(installed by ``install.sh --dev`` when Node is on the box) produces to and consumes from a whole
appliance through its name server.  Each scenario runs in its own ``node`` process
(``nodeclient.js``); the store is read back with our own client."""
from __future__ import annotations

import asyncio
import collections
import json
import os
import shutil
import subprocess

import pytest

from tests.integration.harness import ROOT, create_topic, read_topic, wait_route

DRIVER = os.path.join(ROOT, "tests", "integration", "nodeclient.js")
MODULES = os.path.join(ROOT, ".venv", "node", "node_modules")
pytestmark = pytest.mark.skipif(not shutil.which("node") or not os.path.isdir(os.path.join(MODULES, "ali-ons")),
                                reason="needs node and ali-ons (install.sh --dev installs it when npm is present)")


def node(**args) -> dict:
    r = subprocess.run(["node", DRIVER, json.dumps(args)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "NODE_PATH": MODULES}, cwd=ROOT)
    assert r.returncode == 0, f"ali-ons {args['do']} failed ({r.returncode}): {r.stderr[-2000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_node_client_produces_and_its_push_consumer_filters_by_tag(appliance_factory):
    app = appliance_factory(namesrv=True).start()
    create_topic(app, "NodeTopic", 4)          # ali-ons, unlike Java, does not fall back to TBW102's route
    wait_route(app, "NodeTopic")
    sent = node(do="produce", namesrv=app.namesrv, topic="NodeTopic", count=20)["sent"]
    assert [s["status"] for s in sent] == ["SEND_OK"] * 20
    assert {s["queue"] for s in sent} <= set(range(4)) and len({s["msg_id"] for s in sent}) == 20

    stored = asyncio.run(read_topic(app, "NodeTopic"))     # our own client reads the store back
    count = collections.Counter(m.body.decode() for m in stored)
    assert set(count) == {f"node-{i}" for i in range(20)} and set(count.values()) == {1}, count
    for m in stored:
        i = int(m.body.decode().split("-")[1])
        assert (m.tags, m.keys) == ("TagB" if i % 2 else "TagA", [f"key-{i}"]), (m.body, m.tags, m.keys)
    by_body = {m.body.decode(): m for m in stored}
    for i, s in enumerate(sent):                       # each send's result names where it was stored
        assert (by_body[f"node-{i}"].queue_id, by_body[f"node-{i}"].queue_offset) == (s["queue"], s["offset"])

    seen = node(do="push", namesrv=app.namesrv, topic="NodeTopic", group="node-push", expr="TagA",
                expect=10, seconds=30)["seen"]
    assert sorted(m["body"] for m in seen) == sorted(f"node-{i}" for i in range(0, 20, 2))   # each once, no TagB
    assert {m["tags"] for m in seen} == {"TagA"}
    assert all(m["keys"] == m["body"].replace("node", "key") for m in seen), seen     # ali-ons: the KEYS string
