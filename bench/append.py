"""Append benchmark: N producer processes put 1 KiB messages through the rings into a real
appliance (all roles as processes), ASYNC_FLUSH and SYNC_FLUSH.

Producers pre-encode a pool of distinct records once (client-side encoding is the reader's cost,
reported separately as ``encode``) and then keep ``--window`` slabs of ``--slab`` requests in
flight.  SYNC_FLUSH producers count a message only after ``wait_flushed`` (group commit).
Reports msgs/s, MB/s, the appliance's CPU µs per message (writer + dispatcher + flusher +
supervisor) during the load and including the dispatcher catching up afterwards, how long that
catch-up took (``lag s``), and the idle appliance's CPU % once everything is dispatched.

    .venv/bin/python -m bench.append [--producers 2] [--seconds 8] [--slab 64] [--modes ASYNC_FLUSH,SYNC_FLUSH]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import tempfile
import time

import psutil

from bench.appliance import BenchAppliance
from rocketbox.appliance import config
from rocketbox.shm.layout import C
from rocketbox.shm.state import SharedState


def producer(conf: str, seconds: float, slab: int, window: int, body_size: int, sync: bool, out) -> None:
    from rocketbox.appliance import config
    from rocketbox.shm.ringclient import PutRequest, RingClient
    from rocketbox.shm.state import SharedState

    cfg = config.load(conf)
    sh = SharedState(cfg.geometry()).attach()
    c = RingClient(cfg, sh).open()
    pool = [PutRequest("BenchmarkTest", i % 8, [os.urandom(body_size)],
                       [{"UNIQ_KEY": f"{os.getpid():08X}{i:024X}", "TAGS": "TagA", "KEYS": f"k{i}"}])
            for i in range(slab * 16)]
    t0 = time.perf_counter()
    slabs = [c.encode(pool[i:i + slab]) for i in range(0, len(pool), slab)]
    encode_us = (time.perf_counter() - t0) / len(pool) * 1e6
    in_flight, done, bytes_done, k = [], 0, 0, 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline or in_flight:
        while len(in_flight) < window and time.perf_counter() < deadline:
            arr, sizes, recs, _ = slabs[k % len(slabs)]
            in_flight.append((c.submit_encoded(arr.copy(), sizes, recs), len(recs)))
            k += 1
        ticket, nbytes = in_flight.pop(0)
        res = c.wait(ticket, timeout=30).results
        if sync and not c.wait_flushed(int(res["end_offset"].max()), cfg.syncFlushTimeout / 1000):
            continue
        done += int(res["count"][res["status"] == 0].sum())
        bytes_done += nbytes
    elapsed = time.perf_counter() - start
    out.put({"msgs": done, "bytes": bytes_done, "elapsed": elapsed, "encode_us": encode_us,
             "cpu": sum(psutil.Process().cpu_times()[:2])})
    c.close()
    sh.close()


READERS = 2      # the appliance runs as it ships (readers idle here); no name server: nothing to route


def run_mode(mode: str, args) -> dict:
    app = BenchAppliance("rbx-bench-", args.dir, {
        "flushDiskType": mode, "listenPort": 29911, "brokerName": "bench", "brokerIP1": "127.0.0.1",
        "shmPrefix": "/rbx-bench", "namesrvAddr": "", "readerProcessNums": READERS,
        "ringSlots": args.producers + READERS + 1})   # the readers hold a ring slot each
    conf = app.conf
    app.start()
    try:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        roles0 = app.role_cpu()
        cpu0 = sum(roles0.values())
        ps = [ctx.Process(target=producer, args=(conf, args.seconds, args.slab, args.window, args.body,
                                                  mode == "SYNC_FLUSH", q)) for _ in range(args.producers)]
        for p in ps:
            p.start()
        results = [q.get(timeout=args.seconds + 120) for _ in ps]
        for p in ps:
            p.join()
        cpu1 = sum(app.role_cpu().values())
        t_end = time.perf_counter()
        sh = SharedState(config.load(conf).geometry()).attach()
        while sh.control[C.DISPATCHED] < sh.control[C.WRITTEN]:
            time.sleep(0.01)
        dispatch_lag = time.perf_counter() - t_end
        roles1 = app.role_cpu()
        cpu_dispatched = sum(roles1.values())
        sh.close()
        time.sleep(1)
        idle0, t_idle = sum(app.role_cpu().values()), time.perf_counter()
        time.sleep(args.idle_seconds)
        idle_pct = (sum(app.role_cpu().values()) - idle0) / (time.perf_counter() - t_idle) * 100
    finally:
        app.stop()
    msgs = sum(r["msgs"] for r in results)
    elapsed = max(r["elapsed"] for r in results)
    return {"mode": mode, "msgs": msgs, "msgs_per_s": msgs / elapsed,
            "mb_per_s": sum(r["bytes"] for r in results) / elapsed / 1e6,
            "appliance_cpu_us_per_msg": (cpu1 - cpu0) / max(msgs, 1) * 1e6,
            "appliance_cpu_us_per_msg_incl_dispatch": (cpu_dispatched - cpu0) / max(msgs, 1) * 1e6,
            "dispatch_lag_s": dispatch_lag,
            "role_cpu_us_per_msg": {r: round((roles1.get(r, 0) - roles0.get(r, 0)) / max(msgs, 1) * 1e6, 2)
                                    for r in roles1},
            "producer_cpu_us_per_msg": sum(r["cpu"] for r in results) / max(msgs, 1) * 1e6,
            "encode_us_per_msg": sum(r["encode_us"] for r in results) / len(results),
            "idle_cpu_pct": idle_pct}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--slab", type=int, default=64, help="requests per slab (one ring entry)")
    ap.add_argument("--window", type=int, default=8, help="slabs in flight per producer")
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--modes", default="ASYNC_FLUSH,SYNC_FLUSH")
    ap.add_argument("--idle-seconds", type=float, default=5)
    ap.add_argument("--dir", default=None, help="where the store goes (default: system temp dir)")
    args = ap.parse_args()
    print(f"# append benchmark: producers={args.producers} seconds={args.seconds} slab={args.slab} "
          f"window={args.window} body={args.body}B cpus={os.cpu_count()} mappedFileSizeCommitLog=1GiB "
          f"store={args.dir or tempfile.gettempdir()}")
    print(f"{'mode':<12} {'msgs':>9} {'msgs/s':>9} {'MB/s':>7} {'appl µs/msg':>11} {'+dispatch':>9} "
          f"{'lag s':>6} {'prod µs/msg':>11} {'encode µs':>9} {'idle CPU%':>9}")
    for mode in args.modes.split(","):
        r = run_mode(mode, args)
        print(f"{r['mode']:<12} {r['msgs']:>9} {r['msgs_per_s']:>9.0f} {r['mb_per_s']:>7.1f} "
              f"{r['appliance_cpu_us_per_msg']:>11.1f} {r['appliance_cpu_us_per_msg_incl_dispatch']:>9.1f} "
              f"{r['dispatch_lag_s']:>6.2f} {r['producer_cpu_us_per_msg']:>11.1f} "
              f"{r['encode_us_per_msg']:>9.1f} {r['idle_cpu_pct']:>9.2f}")
        print("#   CPU µs/msg by role, load + catch-up: " +
              ", ".join(f"{k} {v}" for k, v in r["role_cpu_us_per_msg"].items()))
        print("# " + json.dumps(r))


if __name__ == "__main__":
    main()
