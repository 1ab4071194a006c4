"""Delayed messages: how late the appliance delivers them, under other traffic.

The appliance as it ships (HAProxy, ``readerProcessNums`` readers, the scheduler; no name server:
requests go to the broker address) in a temp dir.  While ``bench.e2e``'s load generator sends
single messages to another topic at ``--rate`` msgs/s, one connection sends ``--delayed`` messages
paced over ``--seconds``, each with delay level ``--level`` (``--levels``: the broker's
``messageDelayLevel``).  Afterwards every delivered copy is read back from the destination topic:
a copy's lateness is its store time minus when it was due (its born time plus the level's delay;
born and store times are the same host's clock).  Prints the configuration, the load achieved,
the deliveries (count, missing, duplicated), lateness p50 / p99 / max, and the scheduler's CPU
and memory.

    .venv/bin/python -m bench.delay [--seconds 10] [--delayed 2000] [--level 1] [--rate 20000]

``--timers N``: timers instead (5.x's ``TIMER_DELIVER_MS``), no other load.  Two sender processes
store N timers due uniformly over ``--spread`` seconds, starting ``--lead`` seconds after the
first send, then ``--burst`` more all due at one instant after those.  Printed: the send rate; the
scheduler's anonymous memory and its CPU over ``--idle`` seconds while all N wait (nothing due);
each delivered copy's lateness (store time - TIMER_OUT_MS) p50 / p99 / max, early, missing and
duplicated ones; and the re-put throughput (the burst's copies / the time from its due instant
to its last copy stored).

    .venv/bin/python -m bench.delay --timers 1000000 [--spread 60] [--lead 120] [--burst 200000]
"""
from __future__ import annotations

import collections
import multiprocessing
import socket
import threading
import time

import numpy as np

from bench.appliance import BenchAppliance
from bench.e2e import QUEUES, TOPIC, Rocketbox, create_topic, load_arguments, run_load
from rocketbox.remoting import codec
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.store import message

DELAYED = "BenchDelayed"


def _send_delayed(port: int, n: int, seconds: float, level: int) -> list[int]:
    """``n`` single sends with DELAY=level, paced over ``seconds`` on one connection, pipelined
    (replies read as they come) -> the response codes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    dec, codes = codec.Decoder(), []
    t0 = time.monotonic()
    for i in range(n):
        due = t0 + seconds * i / n
        while time.monotonic() < due:
            time.sleep(max(0.0, min(0.001, due - time.monotonic())))
        props = message.encode_properties({"DELAY": str(level), "UNIQ_KEY": f"D{i:012d}", "TAGS": "Late"})
        ext = {"a": "bench-delay", "b": DELAYED, "c": "TBW102", "d": "4", "e": str(i % 4), "f": "0",
               "g": str(int(time.time() * 1000)), "h": "0", "i": props, "j": "0", "k": "false"}
        s.sendall(codec.encode(Command(R.SEND_MESSAGE_V2, ext, b"d" * 128)))
        s.setblocking(False)
        try:
            codes += [r.code for r in dec.feed(s.recv(1 << 20))]
        except BlockingIOError:
            pass
        s.setblocking(True)
    while len(codes) < n:
        codes += [r.code for r in dec.feed(s.recv(1 << 20))]
    s.close()
    return codes


def _send_timers(port: int, first: int, whens: np.ndarray, window: int = 2000) -> int:
    """Single sends of 128 B with TIMER_DELIVER_MS = ``whens[i]`` (UNIQ_KEY ``T<first + i>``), on
    one connection, ``window`` in flight -> how many were refused."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    dec, refused, answered, body = codec.Decoder(), 0, 0, b"t" * 128
    n = len(whens)
    for i, when in enumerate(whens.tolist()):
        props = f"TIMER_DELIVER_MS\x01{when}\x02UNIQ_KEY\x01T{first + i:012d}"
        ext = {"a": "bench-timer", "b": DELAYED, "c": "TBW102", "d": "4", "e": str(i % 4), "f": "0",
               "g": str(int(time.time() * 1000)), "h": "0", "i": props, "j": "0", "k": "false"}
        s.sendall(codec.encode(Command(R.SEND_MESSAGE_V2, ext, body)))
        while i + 1 - answered > window or (i + 1 == n and answered < n):
            for r in dec.feed(s.recv(1 << 20)):
                answered += 1
                refused += r.code != 0
    s.close()
    return refused


def _timer_copies(port: int, topic: str, queues: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each delivered copy's (UNIQ_KEY number, TIMER_OUT_MS, store time), only those fields kept."""
    keys, outs, stores = [], [], []
    for body in _pulled(port, topic, queues, 1000):
        for h, _body, _topic, props in message.record_fields(body, "pulled"):
            key = message.property_value(props, b"UNIQ_KEY")
            keys.append(int(key[1:]) if key and key.startswith(b"T") else -1)
            outs.append(int(message.property_value(props, b"TIMER_OUT_MS") or 0))
            stores.append(h.store_ts)
    return np.array(keys), np.array(outs), np.array(stores)


def timers_main(args) -> None:
    n, burst = args.timers, args.burst
    print(f"# timer benchmark: {n:,} timers (TIMER_DELIVER_MS) due uniformly over {args.spread:.0f} s starting "
          f"{args.lead:.0f} s after the first send, then {burst:,} due at one instant {args.spread + 5:.0f} s after "
          f"that start; 128 B bodies, 2 sender processes, no other load; ASYNC_FLUSH, readers={args.readers}; "
          f"idle CPU measured over {args.idle:.0f} s")
    app = BenchAppliance("rbx-timer-", args.dir, {
        "flushDiskType": "ASYNC_FLUSH", "listenPort": args.port, "brokerName": "bench", "brokerIP1": "127.0.0.1",
        "shmPrefix": "/rbx-timer", "namesrvAddr": "", "readerProcessNums": args.readers})

    def ready():
        app.wait_serving()
        create_topic(args.port, DELAYED, 4)
    app.start(ready=ready)
    try:
        t0 = time.time()
        start_ms = int((t0 + args.lead) * 1000)
        whens = start_ms + (np.arange(n) * (args.spread * 1000 / n)).astype(np.int64)
        burst_ms = start_ms + int((args.spread + 5) * 1000)
        whens = np.concatenate([whens, np.full(burst, burst_ms, np.int64)])
        half = len(whens) // 2
        with multiprocessing.get_context("fork").Pool(2) as pool:
            refused = sum(pool.starmap(_send_timers, [(args.port, 0, whens[:half]), (args.port, half, whens[half:])]))
        sent_s = time.time() - t0
        time.sleep(3)                                             # the scheduler has read them all
        pending = app.role_memory().get("scheduler", (0, 0))[0]
        cpu0 = app.role_cpu().get("scheduler", 0)
        idle_for = min(args.idle, start_ms / 1000 - time.time() - 1)
        time.sleep(max(idle_for, 0))
        idle_cpu = app.role_cpu().get("scheduler", 0) - cpu0
        ahead = start_ms / 1000 - time.time()
        print(f"sent: {len(whens):,} timers in {sent_s:.1f} s ({len(whens) / sent_s:,.0f} msgs/s), {refused} refused; "
              + (f"the first due {ahead:.0f} s later" if ahead > 0 else "SOME WERE DUE BEFORE ALL WERE SENT: raise --lead"))
        print(f"scheduler with {len(whens):,} pending: {pending / 1024:.1f} MiB anonymous memory, "
              f"{idle_cpu:.3f} CPU s over {idle_for:.0f} s idle ({idle_cpu / max(idle_for, 1e-9) * 100:.2f} % of a core)")
        cpu1 = app.role_cpu().get("scheduler", 0)
        time.sleep(max(0.0, burst_ms / 1000 - time.time()) + 10)
        cpu2 = app.role_cpu().get("scheduler", 0)
        peak = app.role_memory().get("scheduler", (0, 0))[0]
        keys, outs, stores = _timer_copies(args.port, DELAYED, 4)
    finally:
        app.stop()
    counts = np.bincount(keys[keys >= 0], minlength=len(whens))
    late = (stores - outs).astype(np.float64)
    spread = keys < n
    p50, p99 = np.percentile(late[spread], [50, 99]) if spread.any() else (np.nan, np.nan)
    print(f"delivered: {int((counts > 0).sum()):,} of {len(whens) - refused:,} acknowledged, {int((counts > 1).sum())} "
          f"twice, {int((counts == 0).sum()) - refused} missing; early {int((late < 0).sum())}")
    print(f"lateness of the {int(spread.sum()):,} spread over {args.spread:.0f} s (store time - TIMER_OUT_MS): "
          f"p50 {p50:.0f} ms  p99 {p99:.0f} ms  max {late[spread].max() if spread.any() else float('nan'):.0f} ms")
    b = keys >= n
    if b.any():
        took = (stores[b].max() - burst_ms) / 1000
        print(f"re-put throughput: {int(b.sum()):,} due at one instant, all stored {took:.2f} s later: "
              f"{b.sum() / max(took, 1e-9):,.0f} msgs/s (lateness p50 {np.percentile(late[b], 50):.0f} ms)")
    print(f"scheduler: {cpu2 - cpu1:.1f} CPU s delivering {len(keys):,} ({(cpu2 - cpu1) / max(len(keys), 1) * 1e6:.0f} us "
          f"a delivery), {peak / 1024:.1f} MiB anonymous memory at the end")


def _read_all(port: int, topic: str, queues: int) -> list[message.Record]:
    """Every record of ``topic``."""
    return [r for body in _pulled(port, topic, queues, 32) for r in message.decode_records(body)]


def _pulled(port: int, topic: str, queues: int, most: int):
    """The bodies of PULL_MESSAGE answers reading ``topic`` queue by queue from offset 0, up to
    ``most`` records a pull."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        dec = codec.Decoder()
        for q in range(queues):
            offset = 0
            while True:
                s.sendall(codec.encode(Command(R.PULL_MESSAGE, {
                    "consumerGroup": "bench-delay-audit", "topic": topic, "queueId": str(q), "queueOffset": str(offset),
                    "maxMsgNums": str(most), "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0",
                    "subscription": "*", "subVersion": "0"})))
                resp = None
                while resp is None:
                    got = dec.feed(s.recv(1 << 22))
                    resp = got[0] if got else None
                if resp.code != 0:
                    break
                yield resp.body
                offset = int(resp.ext["nextBeginOffset"])


def main() -> None:
    ap = load_arguments(__doc__)
    ap.set_defaults(seconds=10)
    ap.add_argument("--delayed", type=int, default=2000, help="delayed messages sent over --seconds")
    ap.add_argument("--level", type=int, default=1, help="their delay level")
    ap.add_argument("--levels", default="1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
                    help="the broker's messageDelayLevel")
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--port", type=int, default=29900)
    ap.add_argument("--timers", type=int, default=0, help="timers instead of levels (see above)")
    ap.add_argument("--spread", type=float, default=60, help="seconds the timers' due times spread over")
    ap.add_argument("--lead", type=float, default=120, help="seconds from the first send to the first due timer")
    ap.add_argument("--burst", type=int, default=200_000, help="timers due at one instant, after the spread")
    ap.add_argument("--idle", type=float, default=10, help="seconds the idle scheduler's CPU is measured over")
    args = ap.parse_args()
    if args.timers:
        timers_main(args)
        return
    delays = [message_delay_ms(tok) for tok in args.levels.split()]
    delay_ms = delays[min(args.level, len(delays)) - 1]
    print(f"# delay benchmark: {args.delayed} messages of level {args.level} ({delay_ms} ms) over {args.seconds} s, "
          f"beside single sends of {args.body} B paced at {args.rate:.0f} msgs/s ({args.procs} procs x {args.conns} conns); "
          f"ASYNC_FLUSH, readers={args.readers}, levels='{args.levels}'")
    app = BenchAppliance("rbx-delay-", args.dir, {
        "flushDiskType": "ASYNC_FLUSH", "listenPort": args.port, "brokerName": "bench", "brokerIP1": "127.0.0.1",
        "shmPrefix": "/rbx-delay", "namesrvAddr": "", "readerProcessNums": args.readers, "messageDelayLevel": args.levels})

    def ready():
        app.wait_serving()
        create_topic(args.port, TOPIC, QUEUES)
        create_topic(args.port, DELAYED, 4)
    app.start(ready=ready)
    try:
        load: dict = {}
        frames = Rocketbox.send_frames(b"x" * args.body, 1, codec.JSON)
        t = threading.Thread(target=lambda: load.update(run_load("rocketbox", args.port, frames, args, args.window,
                                                                 args.rate)))
        cpu0 = app.role_cpu()
        t.start()
        time.sleep(args.warmup)
        codes = _send_delayed(args.port, args.delayed, args.seconds, args.level)
        t.join()
        time.sleep(delay_ms / 1000 + 2)                     # the last ones are due, and delivered
        cpu1 = app.role_cpu()
        memory = app.role_memory()
        records = _read_all(args.port, DELAYED, 4)
    finally:
        app.stop()
    keys = collections.Counter(r.properties.get("UNIQ_KEY") for r in records)
    late = np.array([r.store_ts - (r.born_ts + delay_ms) for r in records], dtype=np.float64)
    refused = sum(c != 0 for c in codes)
    print(f"load: {load.get('msgs_per_s', 0):,.0f} msgs/s acknowledged, p99 {load.get('p99', float('nan')):.2f} ms, "
          f"errors {load.get('errors')}")
    print(f"delayed: {len(codes) - refused} acknowledged ({refused} refused), {len(keys)} delivered, "
          f"{sum(n > 1 for n in keys.values())} delivered twice, {len(codes) - refused - len(keys)} missing")
    if len(late):
        p50, p99 = np.percentile(late, [50, 99])
        print(f"lateness (store time of the delivered copy - due time): p50 {p50:.0f} ms  p99 {p99:.0f} ms  "
              f"max {late.max():.0f} ms  early {int((late < 0).sum())}")
    sched = cpu1.get("scheduler", 0) - cpu0.get("scheduler", 0)
    anon, fds = memory.get("scheduler", (0, 0))
    print(f"scheduler: {sched:.2f} CPU s over the run ({sched / max(len(keys), 1) * 1e6:.0f} us a delivery), "
          f"{anon / 1024:.1f} MiB anonymous memory, {fds} open files")


def message_delay_ms(tok: str) -> int:
    from rocketbox.appliance.config import parse_delay_levels
    return parse_delay_levels(tok)[0]


if __name__ == "__main__":
    main()
