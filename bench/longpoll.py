"""What held pulls cost a reader: long polling at scale.

A consumer group holds one pull per queue it owns, and each is held up to its
``suspendTimeoutMillis`` (15 s for the Java push consumer) while its queue is idle: a broker with
many groups on many queues holds thousands at once, and most wait on queues where nothing comes.
One appliance (one reader, so it holds them all) gets ``--queues`` idle queues, one message in
each, and per row ``groups x queues`` pulls held at their end through HAProxy.  Printed per row:
how long the reader took to take them all (until a request sent behind them on each connection is
answered), the reader's CPU while they are held and nothing is sent, and while ``--rate`` single
sends/s land on another topic (each dispatched batch wakes the reader, which checks its holds);
then one send to each idle queue, and how long until every held pull is answered with it.

    .venv/bin/python -m bench.longpoll [--queues 1024] [--groups 0,1,4,16] [--rate 200] [--seconds 5]
"""
from __future__ import annotations

import argparse
import os
import socket
import time

import psutil

from bench.appliance import BenchAppliance
from bench.e2e import _call, create_topic
from rocketbox.appliance.process import process_name
from rocketbox.remoting import codec
from rocketbox.remoting.codec import Command, Decoder
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC

CONNS = 8
BARRIER = 1 << 30          # the opaque of each pull connection's last request


def _send_frame(topic: str, queue: int, body: bytes, opaque: int = 0) -> bytes:
    return codec.encode(Command(R.SEND_MESSAGE_V2, {
        "a": "bench-producers", "b": topic, "c": "TBW102", "d": "1", "e": str(queue), "f": "0",
        "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false"}, body, opaque=opaque))


def _pull_frame(group: str, queue: int, offset: int, opaque: int) -> bytes:
    return codec.encode(Command(R.PULL_MESSAGE, {
        "consumerGroup": group, "topic": "Idle", "queueId": str(queue), "queueOffset": str(offset), "maxMsgNums": "32",
        "sysFlag": "2", "commitOffset": "0", "suspendTimeoutMillis": "60000", "subscription": "*",
        "subVersion": "0"}, opaque=opaque))


def _read(sock: socket.socket, dec: Decoder, n: int) -> list[Command]:
    out = []
    while len(out) < n:
        data = sock.recv(1 << 20)
        if not data:
            raise ConnectionError("closed by the appliance")
        out += dec.feed(data)
    return out


def _wait_dispatched(port: int, queue: int, end: int) -> None:
    """Until ``Idle``'s ``queue`` (the last one sent to: dispatch is in order) ends at ``end``."""
    deadline = time.monotonic() + 30
    while int(_call(port, Command(R.GET_MAX_OFFSET, {"topic": "Idle", "queueId": str(queue)})).ext["offset"]) < end:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Idle queue {queue} not at {end} after 30 s")
        time.sleep(0.01)


def _cpu_pct(proc: psutil.Process, seconds: float, during=None) -> float:
    c0, t0 = sum(proc.cpu_times()[:2]), time.perf_counter()
    if during is None:
        time.sleep(seconds)
    else:
        during(seconds)
    return 100 * (sum(proc.cpu_times()[:2]) - c0) / (time.perf_counter() - t0)


def run_row(port: int, reader: psutil.Process, groups: int, queues: int, offset: int, rate: float,
            seconds: float) -> dict:
    """Hold ``groups x queues`` pulls at ``offset`` (every idle queue's end), measure, then send
    one message to each idle queue (their end is ``offset + 1`` after)."""
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(CONNS)]
    decs = [Decoder() for _ in conns]
    producer, pdec = socket.create_connection(("127.0.0.1", port)), Decoder()
    try:
        held, t0 = groups * queues, time.perf_counter()
        frames = [_pull_frame(f"lp-{groups}-{g}", q, offset, g * queues + q) for g in range(groups) for q in range(queues)]
        for c in range(CONNS):      # each connection's last request a barrier: answered once its pulls are held
            conns[c].sendall(b"".join(frames[c::CONNS]) + codec.encode(Command(R.GET_MAX_OFFSET, {
                "topic": "Idle", "queueId": "0"}, opaque=BARRIER)))
        for c, dec in zip(conns, decs):
            early = _read(c, dec, 1)
            if early[0].opaque != BARRIER or len(early) > 1:
                raise RuntimeError(f"a pull was answered before any message came: {early[0]}")
        taken_s = time.perf_counter() - t0
        idle = _cpu_pct(reader, seconds)

        def trickle(secs: float) -> None:
            sent, start = 0, time.perf_counter()
            while (now := time.perf_counter() - start) < secs:
                if sent < now * rate:
                    producer.sendall(_send_frame("Busy", 0, b"x" * 1024))
                    sent += 1
                else:
                    time.sleep(min(0.002, 1 / rate))
            _read(producer, pdec, sent)
        busy = _cpu_pct(reader, seconds, trickle)
        t1 = time.perf_counter()
        producer.sendall(b"".join(_send_frame("Idle", q, b"wake") for q in range(queues)))
        _read(producer, pdec, queues)
        _wait_dispatched(port, queues - 1, offset + 1)
        answers = []
        for c, (sock, dec) in enumerate(zip(conns, decs)):
            answers += _read(sock, dec, len(range(c, held, CONNS)))
        wake_s = time.perf_counter() - t1
        bad = [a for a in answers if a.code != RC.SUCCESS]
        if len(answers) != held or bad:
            raise RuntimeError(f"{len(answers)} answers to {held} held pulls, {len(bad)} not SUCCESS")
        return {"held": held, "taken_s": taken_s, "idle_pct": idle, "busy_pct": busy, "wake_s": wake_s}
    finally:
        for s in conns + [producer]:
            s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", type=int, default=1024, help="idle queues (one topic)")
    ap.add_argument("--groups", default="0,1,4,16", help="comma-separated: groups holding a pull on every queue")
    ap.add_argument("--rate", type=float, default=200, help="sends/s to another topic in the second window")
    ap.add_argument("--seconds", type=float, default=5, help="each CPU window")
    ap.add_argument("--port", type=int, default=29300)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    app = BenchAppliance("rbx-longpoll-", args.dir, {
        "listenPort": args.port, "brokerName": "bench", "brokerIP1": "127.0.0.1", "shmPrefix": "/rbx-longpoll",
        "namesrvAddr": "", "readerProcessNums": 1, "shmQueueSlots": max(4096, 2 * args.queues)})
    print(f"# longpoll benchmark: queues={args.queues} groups={args.groups} rate={args.rate}/s seconds={args.seconds} "
          f"readers=1 cpus={os.cpu_count()}")
    try:
        app.start(ready=app.wait_serving)
        create_topic(args.port, "Idle", args.queues)
        create_topic(args.port, "Busy", 1)
        with socket.create_connection(("127.0.0.1", args.port)) as s:
            s.sendall(b"".join(_send_frame("Idle", q, b"first") for q in range(args.queues)))
            _read(s, Decoder(), args.queues)
        _wait_dispatched(args.port, args.queues - 1, 1)
        reader = next(p for p in psutil.Process(app.proc.pid).children(recursive=True) if p.name() == process_name("reader-0"))
        print(f"{'held pulls':>10} {'taken s':>8} {'idle cpu%':>9} {'cpu% at ' + str(int(args.rate)) + '/s':>13} "
              f"{'all woken s':>11}")
        for end, groups in enumerate([int(g) for g in args.groups.split(",")], start=1):
            r = run_row(args.port, reader, groups, args.queues, end, args.rate, args.seconds)
            print(f"{r['held']:>10} {r['taken_s']:>8.2f} {r['idle_pct']:>9.1f} {r['busy_pct']:>13.1f} "
                  f"{r['wake_s']:>11.2f}", flush=True)
    finally:
        app.stop()


if __name__ == "__main__":
    main()
