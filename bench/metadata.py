"""RocketMQ-sized metadata (#41): many topics and queues, many consumer offsets, at the defaults.

One appliance with the default table sizes gets ``--topics`` topics of ``--queues`` queues each
(UPDATE_AND_CREATE_TOPIC, ``--inflight`` at a time on one connection, as an admin tool scripted
over them would), one message in every queue, every queue pulled, and ``--offsets`` consumer
offsets committed. Printed: the create rate, the send and pull times, each role's open
descriptors and anonymous memory, the shared tables' use, and how long a restart takes until
HAProxy serves again, after which every queue is pulled once more.

    .venv/bin/python -m bench.metadata [--topics 12500] [--queues 8] [--offsets 65536]
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

from bench.appliance import ROOT, BenchAppliance
from bench.e2e import create_topic_command
from bench.longpoll import _read, _send_frame
from rocketbox.remoting import codec
from rocketbox.remoting.codec import Command, Decoder
from rocketbox.remoting.codes import RequestCode as R

WINDOW = 1024              # requests in flight on one connection


def _pipelined(port: int, frames, window: int = WINDOW) -> list[Command]:
    """Send ``frames`` (encoded requests) on one connection, ``window`` at a time -> the responses."""
    out: list[Command] = []
    frames = list(frames)
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        dec = Decoder()
        for at in range(0, len(frames), window):
            chunk = frames[at:at + window]
            s.sendall(b"".join(chunk))
            out += _read(s, dec, len(chunk))
    return out


def _pull(topic: str, queue: int, opaque: int) -> bytes:
    return codec.encode(Command(R.PULL_MESSAGE, {
        "consumerGroup": "bench_meta", "topic": topic, "queueId": str(queue), "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"},
        opaque=opaque))


def _commit(topic: str, queue: int, opaque: int) -> bytes:
    return codec.encode(Command(R.UPDATE_CONSUMER_OFFSET, {
        "consumerGroup": "bench_meta", "topic": topic, "queueId": str(queue), "commitOffset": "1"}, opaque=opaque))


SOLO = 200                  # topic creations timed one at a time, before and after the many


def _timed(what: str, port: int, frames, window: int = WINDOW) -> tuple[float, list[Command]]:
    t0 = time.monotonic()
    out = _pipelined(port, frames, window)
    took = time.monotonic() - t0
    bad = [r for r in out if r.code != 0]
    print(f"{what:<34} {len(out):>8} in {took:7.2f} s  {len(out) / took:>9.0f}/s"
          + (f"  {len(bad)} failed: {bad[0].code} {bad[0].remark}" if bad else ""), flush=True)
    return took, out


def _one_at_a_time(port: int, prefix: str, queues: int, n: int = SOLO) -> None:
    """``n`` topic creations, each sent once the last is answered (an admin tool's loop): what one
    creation costs with as many topics as the broker holds now."""
    took, _out = _timed("topic creations, one at a time", port, (
        codec.encode(create_topic_command(f"{prefix}{t:05d}", queues, t)) for t in range(n)), 1)
    print(f"{'':<34} {took / n * 1000:8.2f} ms each", flush=True)


def _pull_all(port: int, queues: list[tuple[str, int]], what: str, timeout_s: float = 300) -> None:
    """Pull every queue; the queues not dispatched yet (code 19) again until each has its message."""
    t0, left, rounds = time.monotonic(), queues, 0
    while left and time.monotonic() - t0 < timeout_s:
        out = _pipelined(port, [_pull(t, q, i) for i, (t, q) in enumerate(left)])
        left, rounds = [tq for tq, r in zip(left, out) if r.code != 0], rounds + 1
        if left:
            time.sleep(0.5)
    took = time.monotonic() - t0
    print(f"{what:<34} {len(queues):>8} in {took:7.2f} s  ({rounds} rounds until dispatched)"
          + (f"  {len(left)} never found" if left else ""), flush=True)


def _wait_dispatched(app: BenchAppliance, count: int, timeout_s: float = 600) -> float:
    """Until ``count`` queues have an entry (the shared queue table's max offsets; the built-in
    topics' queues are empty; nothing asks the readers meanwhile) -> seconds taken."""
    from rocketbox.appliance import config
    from rocketbox.shm.state import SharedState
    sh = SharedState(config.load(app.conf).geometry()).attach()
    try:
        t0 = time.monotonic()
        qmax = sh.views["queue_max"]
        while (done := int((qmax >= 1).sum())) < count:
            if time.monotonic() - t0 > timeout_s:
                raise TimeoutError(f"{done} of {count} queues dispatched after {timeout_s} s")
            time.sleep(0.2)
        return time.monotonic() - t0
    finally:
        sh.close()


def _report(app: BenchAppliance) -> None:
    print(f"{'role':<12} {'descriptors':>11} {'anon MiB':>9}")
    for role, (anon, fds) in sorted(app.role_memory().items()):
        print(f"{role:<12} {fds:>11} {anon / 1024:>9.1f}")
    out = subprocess.run([sys.executable, "-m", "rocketbox.appliance", "status", "--tables", "-c", app.conf], cwd=ROOT,
                         capture_output=True, text=True).stdout
    print("\n".join(line for line in out.splitlines() if not line.split()[1:2] == ["up"]), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=12_500)
    ap.add_argument("--queues", type=int, default=8, help="queues per topic")
    ap.add_argument("--offsets", type=int, default=65_536, help="consumer offsets committed (one group)")
    ap.add_argument("--inflight", type=int, default=16, help="topic creations in flight")
    ap.add_argument("--port", type=int, default=29400)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    app = BenchAppliance("rbx-metadata-", args.dir, {
        "listenPort": args.port, "brokerName": "bench", "brokerIP1": "127.0.0.1", "shmPrefix": "/rbx-metadata",
        "namesrvAddr": ""})
    queues = [(f"Meta{t:05d}", q) for t in range(args.topics) for q in range(args.queues)]
    print(f"# metadata benchmark: topics={args.topics} queues/topic={args.queues} ({len(queues)} queues) "
          f"offsets={args.offsets} inflight={args.inflight} defaults otherwise; cpus={os.cpu_count()} "
          f"ulimit -n={__import__('resource').getrlimit(__import__('resource').RLIMIT_NOFILE)}")
    try:
        app.start(ready=app.wait_serving)
        _one_at_a_time(args.port, "First", args.queues)
        _timed("topic creations", args.port, (codec.encode(create_topic_command(f"Meta{t:05d}", args.queues, t))
                                         for t in range(args.topics)),
               args.inflight)
        _one_at_a_time(args.port, "Later", args.queues)
        _timed("sends, one per queue", args.port, (_send_frame(t, q, f"{t}/{q}".encode(), i) for i, (t, q) in enumerate(queues)))
        print(f"{'dispatched, every queue':<34} {len(queues):>8} in {_wait_dispatched(app, len(queues)):7.2f} s "
              f"after the last send's answer", flush=True)
        _pull_all(args.port, queues, "pulls, one per queue")
        _timed("consumer offsets committed", args.port,
               (_commit(t, q, i) for i, (t, q) in enumerate(queues[:args.offsets])))
        _report(app)
        app.halt()
        t0 = time.monotonic()
        app.start(ready=app.wait_serving, timeout=300)
        print(f"restart: {time.monotonic() - t0 - 2.5:.1f} s until every role is up and HAProxy serves", flush=True)
        _pull_all(args.port, queues, "pulls after the restart")
        _report(app)
    finally:
        app.stop()


if __name__ == "__main__":
    main()
