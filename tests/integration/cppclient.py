"""Drives RocketMQ's C++ client (PyPI ``rocketmq==0.4.4``, librocketmq.so in its wheel) for the
integration tests, one scenario per process: the native library runs its own threads, logs under
``$HOME/logs`` and can hang or crash on shutdown, none of which may touch the pytest process.

    python cppclient.py '{"do": "produce", "namesrv": ..., "topic": ..., "sync": 5, "oneway": 3, "batch": 4,
                          "delay": 0}'   (delay: the sync sends' delay level)
    python cppclient.py '{"do": "push", "namesrv": ..., "topic": ..., "group": ..., "expr": "*",
                          "expect": 10, "seconds": 20, "linger": 1}'
    python cppclient.py '{"do": "pull", "namesrv": ..., "topic": ..., "group": ..., "expr": "*"}'

The last line on stdout is the scenario's result as JSON."""
import json
import os
import sys
import threading
import time

from rocketmq.client import Message, Producer, PullConsumer, PushConsumer


def _msg(topic: str, body: str, tags: str, keys: str, delay: int = 0) -> Message:
    m = Message(topic)
    m.set_body(body.encode())
    m.set_tags(tags)
    m.set_keys(keys)
    if delay:
        m.set_delay_time_level(delay)
    return m


def produce(a: dict) -> dict:
    """``sync`` sends one by one, ``oneway`` sends, then one batch of ``batch``; bodies name their kind."""
    p = Producer(a.get("producer_group", "cpp-producers"), timeout=5000)
    p.set_namesrv_addr(a["namesrv"])
    p.start()
    out = {"sync": [], "batch": None}
    for i in range(a["sync"]):
        r = p.send_sync(_msg(a["topic"], f"sync-{i}", "TagA", f"sk{i}", a.get("delay", 0)))
        out["sync"].append({"status": r.status.name, "msg_id": r.msg_id, "offset": r.offset})
    for i in range(a["oneway"]):
        p.send_oneway(_msg(a["topic"], f"oneway-{i}", "TagB", f"ok{i}"))
    if a["batch"]:
        r = p.send_batch([_msg(a["topic"], f"batch-{i}", "TagC", f"bk{i}") for i in range(a["batch"])])
        out["batch"] = {"status": r.status.name, "offset": r.offset}
    p.shutdown()
    return out


def push(a: dict) -> dict:
    """A CLUSTERING push consumer until ``expect`` messages came (or ``seconds`` passed), then
    ``linger`` seconds more to catch duplicates; shutdown persists its offsets to the broker."""
    seen, lock = [], threading.Lock()

    def on_message(m):
        with lock:
            seen.append({"body": m.body.decode(), "tags": m.tags.decode(), "keys": m.keys.decode(),
                         "queue": m.queue_id, "offset": m.queue_offset})

    c = PushConsumer(a["group"], orderly=a.get("orderly", False))
    c.set_namesrv_addr(a["namesrv"])
    c.subscribe(a["topic"], on_message, a.get("expr", "*"))
    c.start()
    deadline = time.monotonic() + a["seconds"]
    while time.monotonic() < deadline and len(seen) < a["expect"]:
        time.sleep(0.05)
    time.sleep(a.get("linger", 0))
    return {"seen": seen, "shut_down": _shutdown(c)}


def _shutdown(client, timeout_s: float = 20) -> bool:
    """``client.shutdown()``, given ``timeout_s``: the library's shutdown sometimes never returns
    (its threads wait on each other); what the scenario saw is its result all the same. -> whether
    it returned."""
    t = threading.Thread(target=client.shutdown, daemon=True)
    t.start()
    t.join(timeout_s)
    return not t.is_alive()


def pull(a: dict) -> dict:
    """Every queue of the topic from offset 0 to its end."""
    c = PullConsumer(a["group"])
    c.set_namesrv_addr(a["namesrv"])
    c.start()
    got = [{"body": m.body.decode(), "tags": m.tags.decode(), "queue": m.queue_id, "offset": m.queue_offset}
           for m in c.pull(a["topic"], a.get("expr", "*"), 32)]
    c.shutdown()
    return {"seen": got}


if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    print(json.dumps({"produce": produce, "push": push, "pull": pull}[args["do"]](args)), flush=True)
    os._exit(0)             # not the interpreter's exit, which would wait on a hung shutdown's threads
