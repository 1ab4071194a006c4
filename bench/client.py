"""Client CPU per message: the rocketbox Python client against the real Java 4.9.8 client, each
against the same rocketbox appliance, one after the other.

    .venv/bin/python -m bench.client [--messages 20000] [--body 1024] [--window 64] [--no-java]

Each client runs in a process of its own and measures that process's CPU (every thread's): per
message sent (async sends, ``--window`` in flight), then per message consumed (a push consumer with
the client's defaults, from the topic's first offset), each over ``--messages`` after a warm-up of
half as many (the JIT's, and the Python client's first connections). The Java side is
``bench/java/ClientCost.java``, compiled against ``../shared/rocketmq-4.9.8`` (``--rocketmq``).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------ the Python client's side
async def _send(producer, topic: str, body: bytes, n: int, window: int) -> None:
    from rocketbox import Message
    slots, tasks = asyncio.Semaphore(window), set()

    async def one() -> None:
        try:
            await producer.send(Message(topic, body))
        finally:
            slots.release()
    for _ in range(n):
        await slots.acquire()
        task = asyncio.ensure_future(one())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)


async def python_side(namesrv: str, topic: str, n: int, size: int, window: int) -> dict:
    from rocketbox import Producer, PushConsumer
    body, warm = b"x" * size, n // 2
    async with Producer("cost-python-producer", namesrv) as producer:
        await _send(producer, topic, body, warm, window)
        c0, t0 = time.process_time(), time.monotonic()
        await _send(producer, topic, body, n, window)
        c1, t1 = time.process_time(), time.monotonic()
    got, marks, done = [0], {}, asyncio.Event()

    def listener(msgs) -> bool:
        before = got[0]
        got[0] += len(msgs)
        if before < warm <= got[0]:
            marks["warm"] = (time.process_time(), time.monotonic())
        if got[0] >= warm + n:
            done.set()
        return True
    consumer = PushConsumer("cost-python-consumer", namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET")
    await consumer.subscribe(topic).register(listener).start()
    await done.wait()
    c3, t3 = time.process_time(), time.monotonic()
    await consumer.shutdown()
    c2, t2 = marks["warm"]
    return {"send_cpu_us": (c1 - c0) / n * 1e6, "send_s": t1 - t0, "consume_cpu_us": (c3 - c2) / n * 1e6,
            "consume_s": t3 - t2}


# ------------------------------------------------------------------ the benchmark
def _run_python(namesrv: str, args) -> dict:
    out = subprocess.run([sys.executable, "-m", "bench.client", "--python-side", namesrv, "CostPython",
                          str(args.messages), str(args.body), str(args.window)], cwd=ROOT, capture_output=True,
                         text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"the Python client's side failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def _run_java(namesrv: str, args, work: str) -> dict:
    rmq = os.path.join(args.rocketmq, "rmq")
    classes = os.path.join(work, "classes")
    subprocess.run([rmq, "javac", "-d", classes, os.path.join(ROOT, "bench", "java", "ClientCost.java")],
                   check=True, capture_output=True, timeout=300)
    env = dict(os.environ, RMQ_CP=classes, RMQ_CLIENT_LOGS=os.path.join(work, "java-logs"))
    out = subprocess.run([rmq, "java", "ClientCost", namesrv, "CostJava", str(args.messages), str(args.body),
                          str(args.window)], env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"the Java client's side failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    line = next(line for line in out.stdout.splitlines() if line.startswith("send_cpu_us="))
    return {k: float(v) for k, v in (kv.split("=") for kv in line.split())}


def _wait_registered(namesrv_port: int, timeout: float = 60) -> None:
    from bench.e2e import _call
    from rocketbox.remoting.codec import Command
    from rocketbox.remoting.codes import RequestCode as R
    deadline = time.monotonic() + timeout
    while _call(namesrv_port, Command(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})).code != 0:
        if time.monotonic() > deadline:
            raise TimeoutError("the broker did not register with its name server")
        time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=20000, help="timed messages per phase (after half as many)")
    ap.add_argument("--body", type=int, default=1024, help="body bytes")
    ap.add_argument("--window", type=int, default=64, help="sends in flight")
    ap.add_argument("--no-java", action="store_true", help="the Python client only")
    ap.add_argument("--rocketmq", default=os.path.normpath(os.path.join(ROOT, "..", "shared", "rocketmq-4.9.8")))
    ap.add_argument("--port", type=int, default=29500)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--python-side", nargs=5, metavar=("NAMESRV", "TOPIC", "N", "BODY", "WINDOW"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.python_side:
        namesrv, topic, n, size, window = args.python_side
        print(json.dumps(asyncio.run(python_side(namesrv, topic, int(n), int(size), int(window)))))
        return
    java = not args.no_java
    if java and (not os.path.exists(os.path.join(args.rocketmq, "rmq")) or shutil.which("java") is None):
        sys.exit(f"bench.client: no Apache RocketMQ 4.9.8 at {args.rocketmq} or no java on PATH; --no-java runs "
                 "the Python client only")
    from bench.appliance import BenchAppliance
    namesrv = f"127.0.0.1:{args.port + 30}"
    app = BenchAppliance("rbx-client-", args.dir, {
        "listenPort": args.port, "brokerName": "bench", "brokerIP1": "127.0.0.1", "shmPrefix": "/rbx-client",
        "namesrvAddr": namesrv})
    print(f"# client benchmark: messages={args.messages} (after {args.messages // 2}) body={args.body}B "
          f"window={args.window} broker=rocketbox (2 readers, ASYNC_FLUSH) cpus={os.cpu_count()}")
    work = tempfile.mkdtemp(prefix="rbx-client-java-", dir=args.dir)
    try:
        app.start(ready=app.wait_serving)
        _wait_registered(args.port + 30)
        rows = {"python": _run_python(namesrv, args)}
        if java:
            rows["java-4.9.8"] = _run_java(namesrv, args, work)
    finally:
        app.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'client':<12} {'send µs CPU/msg':>16} {'send msgs/s':>12} {'consume µs CPU/msg':>19} {'consume msgs/s':>15}")
    for name, r in rows.items():
        print(f"{name:<12} {r['send_cpu_us']:>16.1f} {args.messages / r['send_s']:>12,.0f} "
              f"{r['consume_cpu_us']:>19.1f} {args.messages / r['consume_s']:>15,.0f}")
    print("# " + json.dumps({"messages": args.messages, "body": args.body, "window": args.window, **{
        f"{name}_{k}": v for name, r in rows.items() for k, v in r.items()}}))


if __name__ == "__main__":
    main()
