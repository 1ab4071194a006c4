"""Replication: a master appliance and a slave appliance on this box, and the real Apache RocketMQ
4.9.8 master-slave pair beside them, the same Python client driving both, one after the other.

    .venv/bin/python -m bench.ha [--seconds 5] [--rate 20000] [--window 32] [--catchup-mb 256] [--no-rocketmq]
                                 [--rows lag,sends,catchup] [--disk-mb 256]

Rows:

  lag p50/p99       rocketbox, ASYNC_MASTER: ``--rate`` msgs/s of ``--body`` bytes, paced by the
                    load generator of bench.e2e (raw frames, as real clients send), for
                    ``--seconds``; every ms the master's CommitLog end is sampled, and a sample's
                    lag is how long until the slave acknowledged that end (rocketbox only: read
                    from its control block)
  single sends      Producer.send with ``--window`` in flight: ASYNC_MASTER against SYNC_MASTER
  batch sends       Producer.send_batch of 32 messages: the same
  catch-up          ``--catchup-mb`` MB stored on a master first, then an empty slave starts: MB/s
                    until it has acknowledged all of it, and each role's CPU seconds meanwhile;
                    beside it, this box's disk written with an fdatasync every 16 MiB, measured
                    first on a quiet box (the target: at least half of that)

rocketbox runs ASYNC_FLUSH with 2 readers; RocketMQ 4.9.8 a name server, a master and a slave (1 GiB
heap each). The load generator (this process) shares the box's two cores with both appliances.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from bench.appliance import BenchAppliance, wait_port
from bench.e2e import ROCKETMQ_HOME, create_topic
from bench.features import _paced

TOPIC = "BenchHa"
FILE = 64 * 1024 * 1024           # the CommitLog's file size on both sides


def _pair(args, role: str, base_port: int, tag: str) -> tuple[BenchAppliance, BenchAppliance]:
    common = {"brokerName": "bench", "brokerIP1": "127.0.0.1", "mappedFileSizeCommitLog": str(FILE),
              "namesrvAddr": f"127.0.0.1:{base_port + 30}"}
    m = BenchAppliance(f"rbx-ha-{tag}-m-", args.dir, {**common, "listenPort": base_port, "brokerRole": role,
                                                      "shmPrefix": f"/rbx-ha-{tag}-m"})
    m.start(ready=m.wait_serving)
    s = BenchAppliance(f"rbx-ha-{tag}-s-", args.dir, {**common, "listenPort": base_port + 100, "brokerRole": "SLAVE",
                                                      "brokerId": "1", "startNameServer": "false",
                                                      "shmPrefix": f"/rbx-ha-{tag}-s"})
    try:
        s.start(ready=s.wait_serving)
    except BaseException:
        m.stop()
        raise
    return m, s


def _shared(app: BenchAppliance):
    from rocketbox.appliance import config
    from rocketbox.shm.state import SharedState
    return SharedState(config.load(app.conf).geometry()).attach()


def _wait_slave(msh, timeout: float = 60) -> None:
    from rocketbox.shm.layout import C
    deadline = time.monotonic() + timeout
    while not msh.control[C.SLAVE_COUNT]:
        if time.monotonic() > deadline:
            raise TimeoutError("no slave reported to the master")
        time.sleep(0.05)


def _lag(args) -> dict:
    """Replication lag under paced load (rocketbox, ASYNC_MASTER)."""
    from bench.e2e import QUEUES, Rocketbox, run_load
    from bench.e2e import TOPIC as E2E_TOPIC
    from rocketbox.shm.layout import C
    m, s = _pair(args, "ASYNC_MASTER", args.port, "lag")
    msh = _shared(m)
    try:
        _wait_slave(msh)
        create_topic(args.port, E2E_TOPIC, QUEUES)
        ends: list[tuple[float, int]] = []
        acks: list[tuple[float, int]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                now = time.monotonic()
                ends.append((now, int(msh.control[C.WRITTEN])))
                acks.append((now, int(msh.control[C.SLAVE_ACKED])))
                time.sleep(0.001)
        t = threading.Thread(target=sample, daemon=True)
        t.start()
        load = argparse.Namespace(**{**vars(args), "conns": 4, "procs": 2, "warmup": 1.0})
        res = run_load("rocketbox", args.port, Rocketbox.send_frames(os.urandom(args.body), 1), load, window=8,
                       rate=args.rate)
        time.sleep(1.0)
        stop.set()
        t.join()
        lags, j = [], 0
        for t0, end in ends:                                 # the first ack at or past each sampled end
            while j < len(acks) and (acks[j][1] < end or acks[j][0] < t0):
                j += 1
            if j == len(acks):
                break
            if end:
                lags.append((acks[j][0] - t0) * 1000)
        lags.sort()
        return {"rate": res["msgs_per_s"], "p50_ms": statistics.median(lags), "p99_ms": lags[int(0.99 * (len(lags) - 1))],
                "samples": len(lags)}
    finally:
        msh.close()
        s.stop()
        m.stop()


async def _sends(namesrv: str, args) -> dict:
    from rocketbox import Message, Producer
    body, out = os.urandom(args.body), {}
    async with Producer("bench-ha", namesrv) as p:
        statuses: dict[str, int] = {}

        async def one():
            r = await p.send(Message(TOPIC, body))
            statuses[r.status] = statuses.get(r.status, 0) + 1
        n, lat = await _paced(args.seconds, args.window, one)
        lat.sort()
        out["single"] = {"per_s": n / args.seconds, "p99_ms": 1000 * lat[int(0.99 * (len(lat) - 1))],
                         "statuses": dict(statuses)}
        batch = [Message(TOPIC, body) for _ in range(32)]
        n, lat = await _paced(args.seconds, max(1, args.window // 4), lambda: p.send_batch(batch))
        out["batch"] = {"per_s": 32 * n / args.seconds}
    return out


def _rocketbox_sends(args) -> dict:
    out = {}
    for i, role in enumerate(("ASYNC_MASTER", "SYNC_MASTER")):
        port = args.port + 200 + 300 * i
        m, s = _pair(args, role, port, role.lower()[:5])
        msh = _shared(m)
        try:
            _wait_slave(msh)
            create_topic(port, TOPIC, 8)
            time.sleep(1.5)
            out[role] = asyncio.run(_sends(f"127.0.0.1:{port + 30}", args))
        finally:
            msh.close()
            s.stop()
            m.stop()
    return out


def _catch_up(args) -> dict:
    """An empty rocketbox slave copying ``--catchup-mb`` MB from its master; the disk is measured
    first, on a quiet box (after the catch-up the kernel is still writing back GBs)."""
    from rocketbox.appliance import config
    from rocketbox.shm.layout import C
    from rocketbox.shm.ringclient import PutRequest, RingClient
    port = args.port + 400             # (each row's appliances stopped before the next row starts)
    disk = _disk(args) if args.disk_mb else 0.0
    common = {"brokerName": "bench", "brokerIP1": "127.0.0.1", "mappedFileSizeCommitLog": str(FILE), "namesrvAddr": ""}
    m = BenchAppliance("rbx-ha-cu-m-", args.dir, {**common, "listenPort": port, "shmPrefix": "/rbx-ha-cu-m",
                                                  "haTransferBatchSize": str(args.chunk)}).start()
    s = None
    msh = _shared(m)
    try:
        ring = RingClient(config.load(m.conf), msh).open()
        if ring.create_topic(TOPIC, 1) != 0:
            raise RuntimeError(f"cannot create {TOPIC} on the catch-up master")
        body, want = os.urandom(args.body), args.catchup_mb * 1_000_000
        while int(msh.control[C.WRITTEN]) < want:
            (r,) = ring.put([PutRequest(TOPIC, 0, [body] * 64, ["KEYS\x01k"] * 64)], timeout=60)
            if not r.ok:
                raise RuntimeError(f"the catch-up master refused a batch: status {r.status}")
        ring.close()
        end = int(msh.control[C.WRITTEN])
        s = BenchAppliance("rbx-ha-cu-s-", args.dir, {**common, "listenPort": port + 100, "brokerRole": "SLAVE",
                                                       "brokerId": "1", "haMasterAddress": f"127.0.0.1:{port + 1}",
                                                       "haTransferBatchSize": str(args.chunk),
                                                       "shmPrefix": "/rbx-ha-cu-s"})
        done = threading.Event()

        def start_slave() -> None:      # the thread lives on: the slave's stop-with-parent signal follows the
            try:                        # thread that started it (PR_SET_PDEATHSIG)
                s.start()
            except RuntimeError:        # (a short catch-up is over, and the slave stopped, before it was ready)
                if not done.is_set():
                    raise
            done.wait()
        threading.Thread(target=start_slave, daemon=True).start()
        while not msh.control[C.SLAVE_COUNT]:              # timed from the slave's first report
            time.sleep(0.001)
        t0, cpu0 = time.monotonic(), _cpu(m, s)
        while int(msh.control[C.SLAVE_ACKED]) < end:
            if time.monotonic() - t0 > 300:
                raise TimeoutError(f"the slave acknowledged {int(msh.control[C.SLAVE_ACKED])} of {end} in 300 s")
            time.sleep(0.005)
        done.set()
        took = time.monotonic() - t0
        cpu = {k: v - cpu0.get(k, 0.0) for k, v in _cpu(m, s).items()}
        return {"mb": end / 1e6, "seconds": took, "mb_per_s": end / 1e6 / took, "disk_mb_per_s": disk,
                "cpu": {k: v for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]) if v >= max(0.05 * took, 0.01)}}
    finally:
        msh.close()
        if s is not None:
            s.stop()
        m.stop()


def _cpu(m: BenchAppliance, s: BenchAppliance) -> dict[str, float]:
    """CPU seconds each role of the catch-up pair has used so far, as ``master replicator``."""
    import psutil

    from rocketbox.appliance import config
    out = {}
    for side, app in (("master", m), ("slave", s)):
        run = config.load(app.conf).run_dir
        for name in os.listdir(run) if os.path.isdir(run) else []:
            if name.endswith(".pid"):
                try:
                    with open(os.path.join(run, name)) as f:
                        t = psutil.Process(int(f.read())).cpu_times()
                    out[f"{side} {name[:-4]}"] = t.user + t.system
                    out[f"{side} {name[:-4]} (sys)"] = t.system
                except (OSError, ValueError, psutil.Error):
                    continue
    return out


def _disk(args) -> float:
    """This box's disk where the stores are: MB/s of ``--disk-mb`` MiB written in 1 MiB writes,
    fdatasync'd every 16 MiB."""
    os.sync()                         # (what others left dirty is not this measure's to write)
    d = tempfile.mkdtemp(prefix="rbx-ha-disk-", dir=args.dir)
    try:
        path, chunk, total = os.path.join(d, "f"), os.urandom(1 << 20), args.disk_mb
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        t0 = time.monotonic()
        for i in range(total):
            os.write(fd, chunk)
            if i % 16 == 15:
                os.fdatasync(fd)
        os.fdatasync(fd)
        took = time.monotonic() - t0
        os.close(fd)
        return total * (1 << 20) / 1e6 / took
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _rocketmq_sends(args) -> dict:
    """The real 4.9.8 pair: a name server, a master (ASYNC_MASTER, then SYNC_MASTER), a slave."""
    rmq = os.path.join(args.rocketmq, "rmq")
    out = {}
    for i, role in enumerate(("ASYNC_MASTER", "SYNC_MASTER")):
        base = args.port + 1500 + 100 * i
        d = tempfile.mkdtemp(prefix=f"rmq-ha-{role}-", dir=args.dir)
        procs: list[subprocess.Popen] = []
        log = open(os.path.join(d, "java.log"), "wb")
        try:
            procs.append(subprocess.Popen([rmq, "namesrv", str(base + 50), os.path.join(d, "ns")], stdout=log,
                                          stderr=subprocess.STDOUT))
            wait_port(base + 50, procs[0], "RocketMQ name server", timeout=60)
            for who, port, extra in (("m", base, f"brokerId=0\nbrokerRole={role}\n"),
                                     ("s", base + 20, f"brokerId=1\nbrokerRole=SLAVE\nhaMasterAddress=127.0.0.1:{base + 1}\n")):
                conf = os.path.join(d, f"{who}.conf")
                with open(conf, "w") as f:
                    f.write(f"brokerClusterName=DefaultCluster\nbrokerName=bench\nbrokerIP1=127.0.0.1\nlistenPort={port}\n"
                            f"namesrvAddr=127.0.0.1:{base + 50}\nflushDiskType=ASYNC_FLUSH\nstorePathRootDir={d}/{who}\n"
                            f"storePathCommitLog={d}/{who}/commitlog\nmappedFileSizeCommitLog={FILE}\n"
                            f"autoCreateTopicEnable=true\n{extra}")
                procs.append(subprocess.Popen([rmq, "broker", conf, os.path.join(d, who)], stdout=log,
                                              stderr=subprocess.STDOUT))
                wait_port(port, procs[-1], f"RocketMQ {who}", timeout=90)
            deadline = time.monotonic() + 60
            while True:
                try:
                    create_topic(base, TOPIC, 8)
                    break
                except (RuntimeError, OSError):
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            time.sleep(8)                     # the slave's first report comes 5 s after it connects (4.9.8)
            out[role] = asyncio.run(_sends(f"127.0.0.1:{base + 50}", args))
        finally:
            for p in reversed(procs):
                p.terminate()
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
            log.close()
            shutil.rmtree(d, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rate", type=float, default=20_000, help="msgs/s of the lag row")
    ap.add_argument("--window", type=int, default=32, help="sends in flight")
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--catchup-mb", type=int, default=256)
    ap.add_argument("--chunk", type=int, default=32768, help="haTransferBatchSize of the catch-up pair")
    ap.add_argument("--port", type=int, default=30100)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--rocketmq", default=ROCKETMQ_HOME)
    ap.add_argument("--no-rocketmq", action="store_true")
    ap.add_argument("--rows", default="lag,sends,catchup", help="which rows: lag, sends, catchup")
    ap.add_argument("--disk-mb", type=int, default=256, help="MiB of the disk's measure beside the catch-up (0: none)")
    args = ap.parse_args()
    rows = set(args.rows.split(","))
    print(f"# ha benchmark: seconds={args.seconds} rate={args.rate:.0f}/s window={args.window} body={args.body}B "
          f"catch-up={args.catchup_mb} MB in chunks of {args.chunk} B, file={FILE >> 20} MiB, ASYNC_FLUSH, "
          f"cpus={os.cpu_count()}", flush=True)
    if "lag" in rows:
        _lag_row(args)
    if "sends" in rows:
        _sends_rows(args)
    if "catchup" in rows:
        _catch_up_row(args)


def _lag_row(args) -> None:
    lag = _lag(args)
    print(f"lag at {lag['rate']:,.0f} msgs/s (ASYNC_MASTER, rocketbox): p50 {lag['p50_ms']:.2f} ms  "
          f"p99 {lag['p99_ms']:.2f} ms  ({lag['samples']} samples)", flush=True)


def _sends_rows(args) -> None:
    sends = {"rocketbox": _rocketbox_sends(args)}
    if not args.no_rocketmq:
        sends["rocketmq"] = _rocketmq_sends(args)
    print(f"{'sends /s':<26} " + " ".join(f"{n:>22}" for n in sends))
    for role in ("ASYNC_MASTER", "SYNC_MASTER"):
        for row in ("single", "batch"):
            cells = []
            for n in sends:
                r = sends[n][role][row]
                cells.append(f"{r['per_s']:>12,.0f}" + (f" p99 {r['p99_ms']:5.1f}ms" if "p99_ms" in r else " " * 14))
            print(f"{role + ' ' + row:<26} " + " ".join(f"{c:>22}" for c in cells), flush=True)
    for n in sends:
        st = sends[n]["SYNC_MASTER"]["single"]["statuses"]
        print(f"  {n} SYNC_MASTER single statuses: {st}")


def _catch_up_row(args) -> None:
    cu = _catch_up(args)
    disk = (f"this box's disk with fdatasync every 16 MiB: {cu['disk_mb_per_s']:.0f} MB/s; "
            f"ratio {cu['mb_per_s'] / cu['disk_mb_per_s']:.2f}" if cu["disk_mb_per_s"] else "the disk not measured")
    print(f"catch-up of an empty slave: {cu['mb']:.0f} MB in {cu['seconds']:.1f} s = {cu['mb_per_s']:.0f} MB/s "
          f"({disk})", flush=True)
    print("  CPU s meanwhile: " + ", ".join(f"{k} {v:.2f}" for k, v in cu["cpu"].items()), flush=True)


if __name__ == "__main__":
    sys.exit(main())
