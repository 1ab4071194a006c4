"""How long an appliance takes to serve again after a kill -9 under load, by store size.

    .venv/bin/python -m bench.recovery [--sizes-gb 1,10] [--body 1024] [--dir DIR]

For each size: an appliance as it ships (1 GiB CommitLog files, ASYNC_FLUSH, index on) is filled
through the rings with messages of ``--body`` bytes, each with a UNIQ_KEY and a KEY (so the index
is built), until its CommitLog holds that many GB; then, with producers still sending, every
process of the appliance is killed at once (SIGKILL), and it is started again.  Printed per size:
the fill rate, the time from ``appliance start`` until a send through HAProxy is answered
SEND_OK and a pull finds the message (what a client waits for), and what recovery said (where its
scan started, where re-dispatch started, how long recovery itself took by the log's clock).
Target (issue 35): under 10 s for both sizes, and the same for both.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import time

import psutil

from bench.appliance import ROOT, BenchAppliance
from bench.e2e import _call, create_topic
from rocketbox.appliance import config
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.shm.layout import C
from rocketbox.shm.state import SharedState

TOPIC, QUEUES, PORT = "RecoveryTest", 8, 29811
GB = 1 << 30


def producer(conf: str, body: int, until: int, stop, out) -> None:
    """Send batches of 32 through a ring slot until the CommitLog reaches ``until`` bytes (or
    ``stop`` is set); put how many were acknowledged on ``out``."""
    from rocketbox.shm.ringclient import PutRequest, RingClient
    cfg = config.load(conf)
    sh = SharedState(cfg.geometry()).attach()
    c = RingClient(cfg, sh).open()
    payload, done, i = os.urandom(body), 0, 0
    try:
        while sh.control[C.WRITTEN] < until and not stop.is_set():
            reqs = []
            for _ in range(4):
                props = [{"UNIQ_KEY": f"{os.getpid():08X}{i + k:024X}", "KEYS": f"k{i + k}", "TAGS": "TagA"}
                         for k in range(32)]
                reqs.append(PutRequest(TOPIC, i % QUEUES, [payload] * 32, props))
                i += 32
            done += sum(len(r.phys_offsets) for r in c.put(reqs, timeout=60) if r.ok)
    except Exception as e:       # the appliance killed under it: the count so far stands
        if not stop.is_set() and sh.control[C.WRITTEN] < until and until < 1 << 62:
            _say(f"producer failed while filling: {type(e).__name__}: {e}")
    out.put(done)


def _serving(port: int, proc, timeout: float = 120) -> None:
    """Until a send through HAProxy is answered SEND_OK and a pull from its queue finds it."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"the appliance exited with {proc.returncode}")
        try:
            r = _call(port, Command(R.SEND_MESSAGE_V2, {
                "a": "pg", "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": str(int(time.time() * 1000)),
                "h": "0", "i": "UNIQ_KEY\x01PROBE", "j": "0", "k": "false"}, b"probe"))
            if r.code == 0:
                off = int(r.ext["queueOffset"])
                p = _call(port, Command(R.PULL_MESSAGE, {
                    "consumerGroup": "probe", "topic": TOPIC, "queueId": "0", "queueOffset": str(off),
                    "maxMsgNums": "1", "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "3000",
                    "subscription": "*", "subVersion": "0"}))
                if p.code == 0:
                    return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"not serving after {timeout} s")


def _say(text: str) -> None:
    print(f"#   {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def _kill_all(proc) -> None:
    procs = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True)
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=30)


def run_size(gb: float, args) -> dict:
    app = BenchAppliance("rbx-recovery-", args.dir, {
        "listenPort": PORT, "brokerName": "bench", "brokerIP1": "127.0.0.1", "shmPrefix": "/rbx-recovery",
        "namesrvAddr": "", "ringSlots": 8})
    try:
        app.start(ready=app.wait_serving)
        create_topic(PORT, TOPIC, QUEUES)
        cfg = config.load(app.conf)
        ctx = mp.get_context("spawn")
        stop, q = ctx.Event(), ctx.Queue()
        target = int(gb * GB)
        t0 = time.monotonic()
        ps = [ctx.Process(target=producer, args=(app.conf, args.body, target, stop, q)) for _ in range(2)]
        for p in ps:
            p.start()
        sh = SharedState(cfg.geometry()).attach()
        while sh.control[C.WRITTEN] < target:
            time.sleep(0.5)
            if app.proc.poll() is not None:
                raise RuntimeError("the appliance exited while filling")
            if not any(p.is_alive() for p in ps) and sh.control[C.WRITTEN] < target:
                raise RuntimeError("the producers stopped before the store was filled")
        fill_s = time.monotonic() - t0
        _say(f"filled {gb} GB in {fill_s:.1f} s")
        written, dispatched = int(sh.control[C.WRITTEN]), int(sh.control[C.DISPATCHED])
        sh.close()
        load = [ctx.Process(target=producer, args=(app.conf, args.body, 1 << 62, stop, q)) for _ in range(2)]
        for p in load:
            p.start()
        time.sleep(2)                                   # kill under load
        _kill_all(app.proc)
        _say("killed every process of the appliance")
        stop.set()
        sent = sum(q.get(timeout=120) for _ in ps + load)
        for p in ps + load:
            p.join(30)
        for p in ps + load:
            if p.is_alive():
                p.kill()
        _say(f"producers done ({sent:,} acknowledged); starting again")
        log_mark = os.path.getsize(app.log_path)
        with open(app.log_path, "ab") as log:
            t_start = time.monotonic()
            app.proc = subprocess.Popen([sys.executable, "-m", "rocketbox.appliance", "start", "-c", app.conf], cwd=ROOT,
                                        stdout=log, stderr=subprocess.STDOUT)
        _serving(PORT, app.proc)
        serving = time.monotonic() - t_start
        with open(app.log_path, "rb") as f:
            f.seek(log_mark)
            text = f.read().decode("utf-8", "replace")
        rec = re.search(r"recovered \((\w+) exit\): CommitLog end (\d+).*re-dispatched from (\d+)", text)
        stamps = [m for m in re.finditer(r"^(\S+ \S+) supervisor\[\d+\] INFO (recovered|started flusher)", text, re.M)]
        return {"size_gb": gb, "stored_gb": round(written / GB, 2), "messages": sent, "fill_s": round(fill_s, 1),
                "fill_mb_s": round(written / fill_s / 1e6, 1), "dispatched_at_fill_end": dispatched,
                "serving_after_s": round(serving, 2), "exit": rec.group(1) if rec else "?",
                "commitlog_end": int(rec.group(2)) if rec else None,
                "redispatched_from": int(rec.group(3)) if rec else None,
                "redispatched_gb": round((int(rec.group(2)) - int(rec.group(3))) / GB, 3) if rec else None,
                "log": [m.group(0) for m in stamps]}
    finally:
        app.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes-gb", default="1,10", help="store sizes to try, GB (comma list)")
    ap.add_argument("--body", type=int, default=1024, help="message body bytes")
    ap.add_argument("--dir", default=None, help="where the stores go (default: system temp dir); needs the space")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sizes = [float(s) for s in args.sizes_gb.split(",")]
    print(f"# bench.recovery: sizes {sizes} GB, body {args.body} B, 1 GiB CommitLog files, ASYNC_FLUSH, index on; "
          "kill -9 of every process under load, then appliance start until a send and a pull through HAProxy "
          "are answered", flush=True)
    for gb in sizes:
        r = run_size(gb, args)
        print(f"{r['stored_gb']:>6} GB stored ({r['messages']:,} messages, filled at {r['fill_mb_s']} MB/s): "
              f"serving again {r['serving_after_s']} s after start ({r['exit']} exit; re-dispatched "
              f"{r['redispatched_gb']} GB from offset {r['redispatched_from']:,})", flush=True)
        for line in r["log"]:
            print("   ", line)
        if args.json:
            print("#", json.dumps(r))


if __name__ == "__main__":
    sys.exit(main())
