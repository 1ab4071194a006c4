"""The design's floor for single sends: ``bench.e2e``'s single-send rows when the readers do no
broker work at all, side by side with Redis Streams under the same load.

HAProxy, configured as the appliance configures it (``haproxy.service.configure`` from a
broker.conf: splicing, PROXY v2, health checks, least connections), fronts ``--readers`` *null
readers*: uvloop servers that split the frames they read and answer each with one fixed
SEND_MESSAGE reply carrying the request's opaque (a real reply's size: msgId, queueId,
queueOffset).  No decode, no record, no writer, dispatcher or flusher: what is left is the cost
of the appliance's shape (a Python process per reader behind HAProxy, two TCP hops each way) and
the least any Python reader can do per request.  A third server is one null reader without
HAProxy (the load goes straight to it), so HAProxy's part shows.  The load is ``bench.e2e``'s
generator with its single-send frames, pipelined (``--window`` in flight per connection) and
paced (``--rate``); Redis runs with ``appendfsync everysec``.

If a row's ratio here is below 1, no reader code can bring the appliance's ratio to 1 on this
box: the appliance pays this floor and its broker work on top of it.

    .venv/bin/python -m bench.floor [--seconds 5] [--procs 2] [--conns 4] [--window 16] [--readers 2]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

import psutil

from bench import e2e
from bench.appliance import ROOT
from rocketbox.appliance import config
from rocketbox.haproxy import service as haproxy
from rocketbox.net import proxy
from rocketbox.remoting import codec
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import RequestCode as R

_LEN = struct.Struct(">i")
OPAQUE_AT = 9       # in a frame past its length: header length (4), code (2), language (1), version (2)


def null_reply() -> bytes:
    """A stored single send's reply, binary header, opaque 0: ``bench.e2e``'s frames, so the size
    and shape of what the appliance answers (``SendProcessor._reply``)."""
    req = Command(R.SEND_MESSAGE_V2, {}, b"", serialize_type=codec.ROCKETMQ)
    return codec.encode(req.response(0, None, ext={
        "msgId": "7F00000100007090000000000A2B3C4D", "queueId": "3", "queueOffset": "123456",
        "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}))


class NullReader(asyncio.Protocol):
    """Answers every request frame with ``REPLY`` and the request's opaque, nothing else."""
    REPLY = null_reply()
    HEAD, TAIL = REPLY[:4 + OPAQUE_AT], REPLY[4 + OPAQUE_AT + 4:]       # around the opaque

    def connection_made(self, transport) -> None:
        self.transport, self.buf, self.head = transport, bytearray(), True

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if self.head:                              # a PROXY v2 header from HAProxy, or none
            got = proxy.parse(bytes(buf))
            if got is None:
                return
            del buf[:got[0]]
            self.head = False
        at, n, out, head, tail = 0, len(buf), [], self.HEAD, self.TAIL
        while n - at >= 4:
            size = _LEN.unpack_from(buf, at)[0] + 4
            if n - at < size:
                break
            out.append(head + buf[at + 4 + OPAQUE_AT:at + 8 + OPAQUE_AT] + tail)
            at += size
        if at:
            del buf[:at]
            self.transport.writelines(out)


def serve(port: int) -> None:
    """A null reader's process (``bench.floor --serve PORT``), until SIGTERM."""
    import uvloop

    async def main():
        server = await asyncio.get_running_loop().create_server(NullReader, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    uvloop.run(main())


class NullAppliance:
    """HAProxy as the appliance runs it, in front of ``readers`` null readers (``readers`` 0: one
    null reader on ``port`` itself, no HAProxy); each a process of its own."""
    name = "rocketbox"

    def __init__(self, port: int, readers: int, base: str | None):
        self.port, self.readers = port, readers
        self.dir = tempfile.mkdtemp(prefix="rbx-floor-", dir=base)
        self.procs: dict[str, subprocess.Popen] = {}

    def _null_reader(self, name: str, port: int) -> None:
        self.procs[name] = subprocess.Popen([sys.executable, "-m", "bench.floor", "--serve", str(port)], cwd=ROOT)

    def start(self) -> "NullAppliance":
        try:
            if not self.readers:
                self._null_reader("null-reader", self.port)
                e2e.wait_port(self.port, self.procs["null-reader"], "null reader")
                return self
            conf = os.path.join(self.dir, "broker.conf")
            with open(conf, "w") as f:
                f.write(f"storePathRootDir={self.dir}/store\nlistenPort={self.port}\n"
                        f"readerProcessNums={self.readers}\nbrokerIP1=127.0.0.1\nnamesrvAddr=\n")
            cfg = config.load(conf)
            for i in range(self.readers):
                self._null_reader(f"null-reader-{i}", cfg.reader_port(i))
            exe, path = haproxy.configure(cfg)
            self.procs["haproxy"] = subprocess.Popen([exe, "-db", "-f", path], stdout=subprocess.DEVNULL,
                                                     stderr=subprocess.STDOUT)
            for i in range(self.readers):
                e2e.wait_port(cfg.reader_port(i), self.procs[f"null-reader-{i}"], f"null reader {i}")
            e2e.wait_port(self.port, self.procs["haproxy"], "HAProxy")
            time.sleep(2.5)     # HAProxy checks each reader every 1 s: let every reader be marked up first
        except BaseException:
            self.stop()
            raise
        return self

    def cpu(self) -> dict[str, float]:
        return {name: sum(psutil.Process(p.pid).cpu_times()[:2]) for name, p in self.procs.items()}

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


def main() -> None:
    ap = e2e.load_arguments(__doc__)
    ap.add_argument("--readers", type=int, default=2, help="null readers behind HAProxy")
    ap.add_argument("--port", type=int, default=29300, help="HAProxy's port (null readers above it); redis +100")
    ap.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)    # a null reader's process
    args = ap.parse_args()
    if args.serve:
        serve(args.serve)
        return
    if not os.path.exists(args.redis_server):
        raise SystemExit("bench.floor: redis-server not found (apt-get install redis-server, or --redis-server PATH)")
    print(f"# floor benchmark: body={args.body}B seconds={args.seconds} warmup={args.warmup} procs={args.procs} "
          f"conns/proc={args.conns} window={args.window} rate={args.rate:.0f} null readers={args.readers} "
          f"cpus={os.cpu_count()}; load generator and servers share this box")
    print(f"{'server':<40} {'row':<22} {'msgs/s':>9} {'redis':>9} {'ratio':>6}   p50/p99 ms")
    body = os.urandom(args.body)
    frames = {"rocketbox": e2e.Rocketbox.send_frames(body, 1), "redis": e2e.Redis.send_frames(body, 1)}
    rows = (("pipelined", 0.0), (f"paced {args.rate:.0f}/s", args.rate))
    results = {}
    for key, server in (("redis", e2e.RedisServer("everysec", args.dir, args.port + 100, args.redis_server)),
                        ("haproxy", NullAppliance(args.port, args.readers, args.dir)),
                        ("direct", NullAppliance(args.port + 50, 0, args.dir))):
        server.start()
        try:
            for row, rate in rows:
                results[key, row] = e2e.with_cpu(server, e2e.run_load, server.name, server.port,
                                                 frames[server.name], args, args.window, rate=rate)
        finally:
            server.stop()
    names = {"redis": "redis-server (everysec)", "haproxy": f"HAProxy + {args.readers} null readers",
             "direct": "1 null reader, no HAProxy"}
    for key in ("haproxy", "direct", "redis"):
        for row, _rate in rows:
            r, rd = results[key, row], results["redis", row]
            errs = f"  errors: {r['errors']}" if r["errors"] else ""
            print(f"{names[key]:<40} {row:<22} {r['msgs_per_s']:>9.0f} {rd['msgs_per_s']:>9.0f} "
                  f"{r['msgs_per_s'] / max(rd['msgs_per_s'], 1):>6.2f}   {r['p50']:.2f}/{r['p99']:.2f}{errs}")
            print("#   CPU µs/msg " + " ".join(f"{k} {v:.1f}" for k, v in sorted(r["cpu"].items()))
                  + f" ({r['cpu_pct']:.0f}% of a core; load generator {r['gen_pct']:.0f}%)", flush=True)


if __name__ == "__main__":
    main()
