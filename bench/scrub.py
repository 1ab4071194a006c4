"""The scrub: how fast it verifies the CommitLog, and what it costs a load beside it.

    .venv/bin/python -m bench.scrub [--gb 1] [--seconds 8] [--rate-mb 32] [--dir DIR]

Fills a store (1 GiB CommitLog files, 1 KiB bodies with keys) to ``--gb``, then:
1. ``appliance scrub`` on the stopped store, unbounded: MB/s verified and the CPU it took;
2. the same load (bench.append's producer through the rings, 2 processes, ``--seconds``) twice on
   the running appliance: with the background scrub off, and with it scrubbing continuously at
   ``--rate-mb`` MB/s (``scrubIntervalHours=0``): msgs/s of each, and the cleaner's CPU.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import re
import subprocess
import sys
import time

from bench.append import producer as load_producer
from bench.appliance import ROOT, BenchAppliance
from bench.e2e import create_topic
from bench.recovery import GB, QUEUES, TOPIC
from bench.recovery import producer as fill_producer

PORT = 29711


def _appliance(args, **extra) -> BenchAppliance:
    return BenchAppliance("rbx-scrub-", args.dir, {
        "listenPort": PORT, "brokerName": "bench", "brokerIP1": "127.0.0.1", "shmPrefix": "/rbx-scrub",
        "namesrvAddr": "", "ringSlots": 8, **extra})


def _load(conf: str, seconds: float) -> float:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=load_producer, args=(conf, seconds, 64, 8, 1024, False, q)) for _ in range(2)]
    for p in ps:
        p.start()
    res = [q.get(timeout=seconds + 120) for _ in ps]
    for p in ps:
        p.join()
    return sum(r["msgs"] for r in res) / max(r["elapsed"] for r in res)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--rate-mb", type=int, default=32)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    print(f"# bench.scrub: store {args.gb} GB (1 KiB bodies), load 2 ring producers x {args.seconds} s, "
          f"background scrub at {args.rate_mb} MB/s", flush=True)
    app = _appliance(args)
    try:
        app.start(ready=app.wait_serving)
        create_topic(PORT, TOPIC, QUEUES)
        ctx = mp.get_context("spawn")
        stop, q = ctx.Event(), ctx.Queue()
        ps = [ctx.Process(target=fill_producer, args=(app.conf, 1024, int(args.gb * GB), stop, q)) for _ in range(2)]
        for p in ps:
            p.start()
        for p in ps:
            p.join()
        app.proc.send_signal(15)
        app.proc.wait(120)
        t0 = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "rocketbox.appliance", "scrub", "-c", app.conf], cwd=ROOT,
                             capture_output=True, text=True)
        print(f"appliance scrub, stopped store: {out.stdout.strip()} (wall {time.monotonic() - t0:.1f} s "
              "with the interpreter's start)", flush=True)
        for label, rate in (("scrub off", 0), (f"scrub at {args.rate_mb} MB/s", args.rate_mb << 20)):
            with open(app.conf, "a") as f:
                f.write(f"scrubBytesPerSecond={rate}\nscrubIntervalHours=0\n")
            app.start(ready=app.wait_serving)
            cpu0 = app.role_cpu().get("cleaner", 0.0)
            t0 = time.monotonic()
            rate_msgs = _load(app.conf, args.seconds)
            cleaner_pct = (app.role_cpu().get("cleaner", 0.0) - cpu0) / (time.monotonic() - t0) * 100
            app.proc.send_signal(15)
            app.proc.wait(120)
            with open(app.log_path, encoding="utf-8", errors="replace") as f:
                passes = len(re.findall(r"scrub pass done", f.read()))
            print(f"{label:>18}: {rate_msgs:,.0f} msgs/s appended; cleaner {cleaner_pct:.1f}% of a core; "
                  f"scrub passes finished so far {passes}", flush=True)
    finally:
        app.stop()


if __name__ == "__main__":
    sys.exit(main())
