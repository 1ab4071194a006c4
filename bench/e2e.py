"""End-to-end benchmark: rocketbox through HAProxy, side by side with Apache RocketMQ 4.9.8 and
Redis Streams, same load.

Both servers run on this box, started by the benchmark in a temp dir: the appliance as it ships
(HAProxy in front of ``readerProcessNums`` readers; no name server: the load goes to the broker
address) and ``redis-server`` with ``appendonly yes``.  Pairs: ASYNC_FLUSH against ``appendfsync
everysec``, SYNC_FLUSH against ``appendfsync always``.

One load generator drives both (``--procs`` processes x ``--conns`` connections, blocking sockets and a
selector): every request is pre-encoded once (a pull all but its offset's digits; rocketbox's sends
as a cycle of ``KEYS_PER_QUEUE`` messages per queue with keys of their own), each connection
keeps ``--window`` requests in flight (pipelining, as RocketMQ's async sends and Redis pipelines
do), and replies are matched to requests in order, read only as far as the count needs (a reply's
code; a pull's next offset and its records' lengths; an XREADGROUP's entries).  rocketbox's
sends carry the JSON headers every real client sends by default (``--binary``: binary ROCKETMQ
headers; pulls are binary).  The real Apache RocketMQ 4.9.8 broker (``--rocketmq``, default
``../shared/rocketmq-4.9.8``) runs as a third server with the same frames and the same flush mode,
each of its rows after ``--rocketmq-warmup`` s (8) for its JIT.  What differs is only the bytes:

  send single  rocketbox SEND_MESSAGE_V2, 1 message      Redis XADD bench * body <1 KiB>
  send batch   rocketbox SEND_BATCH_MESSAGE, --batch msgs Redis --batch XADDs written as one pipeline
  consume      PULL_MESSAGE maxMsgNums=32, one pull in    XREADGROUP COUNT 32 NOACK, as many reads in
               flight per queue (as a RocketMQ consumer)  flight (8) over --procs connections
  latency      single sends paced at --rate msgs/s over all connections (an open loop, not pipelined
               to the limit), p50/p99/p99.9 per message

Throughput counts acknowledged messages in the measured window (after --warmup s); a reply that is
not success counts as an error and is printed.  Latency is send-to-reply per request.  Under each
row, the servers' CPU per acknowledged message, by process (rocketbox by role), over the whole
run, and how much of a core that was; beside it, the load generator's share of a core (it runs
on the same two cores, so what it takes is not the server's).  Before the rows, ``bench.hiccups``'
CPU steadiness for ``--box-seconds``: how fast this box runs Python right now (its speed moves by
~2x over a day on the project's VM, and every row with it).  rocketbox's metrics role is scraped
every ``--metrics-every`` s (1) all along, as a Prometheus would; 0 runs the appliance without it,
so the two can be compared.

The gRPC rows (RocketMQ 5.x's protocol, issue #55; ``--no-grpc`` leaves them out) are rocketbox's
alone: the appliance runs its gRPC front too, and after its 4.x rows ``bench/grpc.py``'s raw gRPC
load (``grpc.aio``, the same procs x conns x window, one message a SendMessage) and the official
Python 5.x client's synchronous sends (``--grpc-client-threads`` threads) run against it, each
printed beside the remoting path's single sends of the same run.

    .venv/bin/python -m bench.e2e [--seconds 5] [--procs 2] [--conns 4] [--window 16] [--batch 32] [--binary]
                                  [--no-rocketmq] [--rocketmq DIR] [--rocketmq-warmup 8] [--no-grpc]

Transactions, request-reply and SQL92-filtered consumes, which need a client's logic between
requests (an END_TRANSACTION after each half's answer, a responder), are ``bench.features``' rows,
beside the same RocketMQ 4.9.8.
"""
from __future__ import annotations

import argparse
import collections
import multiprocessing as mp
import os
import re
import resource
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np
import psutil

from bench import hiccups
from bench.appliance import BenchAppliance, wait_port
from rocketbox.appliance import config
from rocketbox.grpcfront import v2
from rocketbox.remoting import codec
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.store.message import encode_client_batch, encode_properties

TOPIC, QUEUES, GROUP = "BenchE2E", 8, "bench-consumers"
KEYS_PER_QUEUE = 1024      # distinct message keys per queue in the requests a generator cycles through
_LEN = struct.Struct(">i")
_REPLY_CODE = struct.Struct(">h")
_JSON_CODE = re.compile(rb'"code":(-?\d+)')
_JSON_OPAQUE = re.compile(rb'"opaque":(-?\d+)')
_JSON_NEXT = re.compile(rb'"nextBeginOffset":"(\d+)"')
ROCKETMQ_HOME = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                                              "rocketmq-4.9.8"))
_REDIS_ENTRY_TAIL = b"*2\r\n$4\r\nbody\r\n"


# ---------------------------------------------------------------- the two protocols
class Rocketbox:
    """Frames in the ROCKETMQ binary header, so a reply's code sits at a fixed place; sends with
    ``--json`` in the JSON header every real client sends by default (their replies come in JSON
    too, and the generator finds their code by a search)."""
    name = "rocketbox"

    @staticmethod
    def send_frames(body: bytes, batch: int, serialize_type: int = codec.ROCKETMQ) -> list[tuple[bytes, int, int]]:
        """(request bytes, messages in it, replies it gets), queue by queue in turn: ``KEYS_PER_QUEUE``
        messages to each queue, each with a UNIQ_KEY and KEYS of its own, as real producers send
        them (so the IndexFile's hash slots are touched all over, not a few kept warm)."""
        out, born, pid = [], str(int(time.time() * 1000)), os.getpid()
        for i in range(max(1, KEYS_PER_QUEUE // batch)):
            for q in range(QUEUES):
                props = [encode_properties({"UNIQ_KEY": f"{pid:08X}{q:08X}{n:016X}", "TAGS": "TagA",
                                            "KEYS": f"k{q}-{n}"}) for n in range(i * batch, (i + 1) * batch)]
                ext = {"a": "bench-producers", "b": TOPIC, "c": "TBW102", "d": str(QUEUES), "e": str(q), "f": "0",
                       "g": born, "h": "0", "i": props[0], "j": "0", "k": "false", "m": "true" if batch > 1 else "false"}
                if batch > 1:
                    cmd = Command(R.SEND_BATCH_MESSAGE, ext, encode_client_batch([(0, body, p) for p in props]),
                                  serialize_type=serialize_type)
                else:
                    cmd = Command(R.SEND_MESSAGE_V2, ext, body, serialize_type=serialize_type)
                out.append((codec.encode(cmd), batch, 1))
        return out

    @staticmethod
    def pull_frame(queue_id: int, offset: int) -> bytes:
        """PULL_MESSAGE of up to 32 messages from ``queue_id`` at ``offset``, ``opaque`` the queue
        id; the offset's digits are the frame's last bytes (``PullFrames``)."""
        return codec.encode(Command(R.PULL_MESSAGE, {
            "consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id), "maxMsgNums": "32",
            "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
            "subVersion": "0", "expressionType": "TAG", "queueOffset": str(offset)}, opaque=queue_id,
            serialize_type=codec.ROCKETMQ))

    @staticmethod
    def pulled(buf: bytearray) -> tuple[list[tuple[int, int, int, int]], int]:
        """Complete pull replies in ``buf`` (binary headers, or JSON as Apache RocketMQ answers):
        (opaque, code, nextBeginOffset, messages) of each, and the bytes they took."""
        out, at, n = [], 0, len(buf)
        while n - at >= 8:
            size = _LEN.unpack_from(buf, at)[0] + 4
            if n - at < size:
                break
            body = at + 8 + (_LEN.unpack_from(buf, at + 4)[0] & 0xFFFFFF)
            if buf[at + 4] == codec.JSON:
                code = int(_JSON_CODE.search(buf, at + 8, body).group(1))
                opaque = int(_JSON_OPAQUE.search(buf, at + 8, body).group(1))
                found = _JSON_NEXT.search(buf, at + 8, body)
                next_offset = int(found.group(1)) if found else -1
            else:
                code, opaque = _REPLY_CODE.unpack_from(buf, at + 8)[0], _LEN.unpack_from(buf, at + 13)[0]
                k = buf.find(b"nextBeginOffset", at + 8, body) + len(b"nextBeginOffset")
                next_offset = int(buf[k + 4:k + 4 + _LEN.unpack_from(buf, k)[0]])
            msgs, at = 0, at + size
            while body < at:
                body += _LEN.unpack_from(buf, body)[0]
                msgs += 1
            out.append((opaque, code, next_offset, msgs))
        return out, at

    @staticmethod
    def replies(buf: bytearray) -> tuple[list[int], int]:
        """Complete replies in ``buf``: their codes (0 = success), and the bytes they took."""
        codes, at, n = [], 0, len(buf)
        while n - at >= 10:
            size = _LEN.unpack_from(buf, at)[0] + 4
            if n - at < size:
                break
            if buf[at + 4] == codec.JSON:
                head_end = at + 8 + (_LEN.unpack_from(buf, at + 4)[0] & 0xFFFFFF)
                codes.append(int(_JSON_CODE.search(buf, at + 8, head_end).group(1)))
            else:
                codes.append(int.from_bytes(buf[at + 8:at + 10], "big", signed=True))
            at += size
        return codes, at


class PullFrames:
    """``Rocketbox.pull_frame`` without encoding a command per pull (the load generator's cost is
    not the server's): per queue and number of digits in the offset, the frame but its last
    bytes, the offset's digits."""

    def __init__(self):
        self.heads: dict[tuple[int, int], bytes] = {}

    def __call__(self, queue_id: int, offset: int) -> bytes:
        digits = b"%d" % offset
        head = self.heads.get((queue_id, len(digits)))
        if head is None:
            probe = 10 ** (len(digits) - 1)
            frame = Rocketbox.pull_frame(queue_id, probe)
            assert frame.endswith(b"%d" % probe)
            head = self.heads[(queue_id, len(digits))] = frame[:-len(digits)]
        return head + digits


class Redis:
    name = "redis"

    @staticmethod
    def _cmd(*args: bytes) -> bytes:
        return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)

    @classmethod
    def send_frames(cls, body: bytes, batch: int) -> list[tuple[bytes, int, int]]:
        return [(cls._cmd(b"XADD", b"bench", b"*", b"body", body) * batch, batch, batch)]

    @staticmethod
    def replies(buf: bytearray) -> tuple[list[int], int]:
        """Complete XADD replies (bulk strings; ``-`` is an error)."""
        codes, at, n = [], 0, len(buf)
        while at < n:
            eol = buf.find(b"\r\n", at)
            if eol < 0:
                break
            if buf[at] == 0x24:                               # $len\r\n<id>\r\n
                end = eol + 2 + int(buf[at + 1:eol]) + 2
                if end > n:
                    break
                codes.append(0)
                at = end
            else:                                             # -ERR ...\r\n
                codes.append(1)
                at = eol + 2
        return codes, at


PROTOCOLS = {"rocketbox": Rocketbox, "rocketmq": Rocketbox, "redis": Redis}


# ---------------------------------------------------------------- load generator
def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _fan_out(target, per_process_args: list[tuple], timeout: float) -> tuple[list[dict], float]:
    """Run ``target(*args, queue)`` in one forked process per args tuple.
    -> (their reports, the CPU seconds they used: user + system, read once they are reaped)."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    ps = [ctx.Process(target=target, args=(*a, q)) for a in per_process_args]
    for p in ps:
        p.start()
    res = [q.get(timeout=timeout) for _ in ps]
    for p in ps:
        p.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return res, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _send_load(proto_name: str, port: int, frames, conns: int, window: int, seconds: float, warmup: float,
               rate: float, out) -> None:
    """One generator process: ``conns`` connections, ``window`` requests in flight on each (or paced
    at ``rate`` msgs/s over them); reports acked messages, errors and latencies of the measured window."""
    proto = PROTOCOLS[proto_name]
    sel = selectors.DefaultSelector()
    state = []
    for c in range(conns):
        s = _connect(port)
        st = {"sock": s, "buf": bytearray(), "sent": collections.deque(), "k": c}
        sel.register(s, selectors.EVENT_READ, st)
        state.append(st)
    t0 = time.perf_counter()
    m0, t_end = t0 + warmup, t0 + warmup + seconds
    acked, total, errors, lat, issued, rr = 0, 0, collections.Counter(), [], 0, 0
    while True:
        now = time.perf_counter()
        if now < t_end:
            chunks = {}
            if rate <= 0:                            # pipelined: fill every connection's window
                for st in state:
                    for _ in range(window - len(st["sent"])):
                        issued += _queue(st, frames, now, chunks)
            else:                                    # paced: what is due, round-robin over connections
                budget = int(rate * (now - t0)) - issued
                for _ in range(len(state) * window):
                    if budget <= 0:
                        break
                    st = state[rr % len(state)]
                    rr += 1
                    if len(st["sent"]) < window:
                        n = _queue(st, frames, now, chunks)
                        issued, budget = issued + n, budget - n
            for st, chunk in chunks.values():
                st["sock"].sendall(b"".join(chunk))
        elif not any(st["sent"] for st in state):
            break
        for key, _ev in sel.select(0.0005 if rate > 0 else 1.0):
            st = key.data
            data = st["sock"].recv(1 << 20)
            if not data:
                raise ConnectionError(f"{proto_name} closed a connection")
            st["buf"] += data
            codes, used = proto.replies(st["buf"])
            del st["buf"][:used]
            t = time.perf_counter()
            for code in codes:
                head = st["sent"][0]
                head[2] -= 1
                if code != 0:
                    head[3] += 1
                    errors[code] += 1
                if head[2]:
                    continue
                sent_at, n, _, errs = st["sent"].popleft()
                total += 0 if errs else n
                if m0 <= sent_at < t_end and not errs:
                    acked += n
                    lat.append(t - sent_at)
        if time.perf_counter() > t_end + 60:
            raise TimeoutError(f"{proto_name}: replies still missing 60 s after the load stopped")
    for st in state:
        st["sock"].close()
    out.put({"acked": acked, "total": total, "errors": dict(errors), "lat": np.array(lat, dtype=np.float64)})


def _queue(st: dict, frames, now: float, chunks: dict) -> int:
    """Queue the connection's next request for this round's write; the messages it carries."""
    frame, n, replies = frames[st["k"] % len(frames)]
    st["k"] += 1
    chunks.setdefault(id(st), (st, []))[1].append(frame)
    st["sent"].append([now, n, replies, 0])      # sent at, msgs, replies to come, errors
    return n


def summarize(res: list[dict], seconds: float, gen_cpu: float) -> dict:
    """Generator processes' reports (acked, errors, latencies in s) as a row: msgs/s, p50/p99/p99.9 ms."""
    lat = np.concatenate([r["lat"] for r in res]) * 1000
    errors: collections.Counter = collections.Counter()
    for r in res:
        errors.update(r["errors"])
    pct = np.percentile(lat, [50, 99, 99.9]) if len(lat) else [float("nan")] * 3
    return {"msgs_per_s": sum(r["acked"] for r in res) / seconds, "p50": pct[0], "p99": pct[1], "p999": pct[2],
            "errors": dict(errors), "gen_cpu_s": gen_cpu}


def run_load(proto_name: str, port: int, frames, args, window: int, rate: float = 0.0) -> dict:
    res, gen_cpu = _fan_out(_send_load, [(proto_name, port, frames, args.conns, window, args.seconds, args.warmup,
                                          rate / args.procs)] * args.procs, timeout=args.seconds + args.warmup + 120)
    return {**summarize(res, args.seconds, gen_cpu), "msgs": sum(r["total"] for r in res)}


# ---------------------------------------------------------------- consume
def _consume_rocketbox(port: int, queues: list[int], out) -> None:
    """One pull in flight per queue, each queue read from offset 0 until a pull finds nothing."""
    s = _connect(port)
    buf, pull = bytearray(), PullFrames()
    got, t0 = 0, time.perf_counter()
    s.sendall(b"".join(pull(q, 0) for q in queues))
    pending = len(queues)
    while pending:
        data = s.recv(1 << 20)
        if not data:
            raise ConnectionError("rocketbox closed the connection")
        buf += data
        replies, used = Rocketbox.pulled(buf)
        del buf[:used]
        for queue_id, code, next_offset, msgs in replies:
            pending -= 1
            if code != 0:                       # PULL_NOT_FOUND: this queue is read to its end
                continue
            got += msgs
            s.sendall(pull(queue_id, next_offset))
            pending += 1
    out.put({"msgs": got, "elapsed": time.perf_counter() - t0})
    s.close()


def _consume_redis(port: int, consumer: str, window: int, out) -> None:
    """``window`` reads in flight until one finds nothing new."""
    s = _connect(port)
    req = Redis._cmd(b"XREADGROUP", b"GROUP", b"g", consumer.encode(), b"COUNT", b"32", b"NOACK",
                     b"STREAMS", b"bench", b">")
    buf, got, t0 = bytearray(), 0, time.perf_counter()
    s.sendall(req * window)
    pending, done = window, False
    while pending:
        data = s.recv(1 << 20)
        if not data:
            raise ConnectionError("redis closed the connection")
        buf += data
        while (reply := _redis_read_reply(buf)) is not None:
            n, used = reply
            del buf[:used]
            pending -= 1
            got += n
            done = done or n == 0
            if not done:
                s.sendall(req)
                pending += 1
    out.put({"msgs": got, "elapsed": time.perf_counter() - t0})
    s.close()


def _redis_read_reply(buf: bytearray) -> tuple[int, int] | None:
    """One complete XREADGROUP reply at the start of ``buf``: (entries, bytes), None if incomplete.
    Shape: *1 *2 $bench *N, then per entry *2 $id *2 $body <value>; nil (*-1) when nothing is new."""
    if buf.startswith(b"*-1\r\n"):
        return 0, 5
    head = b"*1\r\n*2\r\n$5\r\nbench\r\n*"
    eol = buf.find(b"\r\n", len(head))
    if eol < 0:
        return None
    entries, at = int(buf[len(head):eol]), eol + 2
    for _ in range(entries):
        # *2\r\n $<idlen>\r\n<id>\r\n *2\r\n$4\r\nbody\r\n $<vlen>\r\n<value>\r\n
        eol = buf.find(b"\r\n", at + 4)
        if eol < 0:
            return None
        at = eol + 2 + int(buf[at + 5:eol]) + 2 + len(_REDIS_ENTRY_TAIL)
        eol = buf.find(b"\r\n", at)
        if eol < 0:
            return None
        at = eol + 2 + int(buf[at + 1:eol]) + 2
        if at > len(buf):
            return None
    return entries, at


def run_consume(target, args) -> dict:
    """As many reads in flight for both: rocketbox one pull per queue (``QUEUES`` split over the
    processes), Redis ``QUEUES / procs`` XREADGROUPs per process."""
    if target.name in ("rocketbox", "rocketmq"):
        res, gen_cpu = _fan_out(_consume_rocketbox, [(target.port, list(range(QUEUES))[i::args.procs])
                                                     for i in range(args.procs)], timeout=600)
    else:
        res, gen_cpu = _fan_out(_consume_redis, [(target.port, f"c{i}", QUEUES // args.procs)
                                                 for i in range(args.procs)], timeout=600)
    return {"msgs": sum(r["msgs"] for r in res), "msgs_per_s": sum(r["msgs"] for r in res) /
            max(r["elapsed"] for r in res), "gen_cpu_s": gen_cpu}


def with_cpu(server, run, *args, **kwargs) -> dict:
    """``run``'s result, plus the server's CPU over the whole run (warm-up and drain included):
    ``cpu`` µs per message acknowledged in it, by process, and ``cpu_pct`` of one core; and
    ``gen_pct``, the load generator's share of a core over the same time (the two share the box)."""
    c0, t0 = server.cpu(), time.perf_counter()
    res = run(*args, **kwargs)
    c1, wall = server.cpu(), time.perf_counter() - t0
    used = {k: v - c0.get(k, 0.0) for k, v in c1.items()}
    return {**res, "cpu": {k: v / max(res["msgs"], 1) * 1e6 for k, v in used.items()},
            "cpu_pct": 100 * sum(used.values()) / wall, "gen_pct": 100 * res["gen_cpu_s"] / wall}


# ---------------------------------------------------------------- the servers
class RocketboxServer:
    name = "rocketbox"

    def __init__(self, mode: str, base: str, port: int, readers: int, metrics_every: float = 1.0, grpc: bool = False):
        """``metrics_every``: seconds between two scrapes of the metrics role's /metrics, as a
        Prometheus would make them, all along (0: no metrics role); ``grpc``: the gRPC front too,
        on ``port`` + 33 (``grpc_endpoint``)."""
        self.port, self.mode, self.metrics_every = port, mode, metrics_every
        self.grpc_endpoint = f"127.0.0.1:{port + 33}" if grpc else None
        self.app = BenchAppliance(f"rbx-e2e-{mode}-", base, {
            "flushDiskType": mode, "listenPort": port, "brokerName": "bench", "brokerIP1": "127.0.0.1",
            "shmPrefix": "/rbx-e2e", "namesrvAddr": "", "readerProcessNums": readers,
            **({} if metrics_every > 0 else {"metricsPort": 0}), **({"grpcListenPort": port + 33} if grpc else {})})
        self.dir, self.conf = self.app.dir, self.app.conf
        self.scraping = threading.Event()
        self.scrapes, self.scrape_failures = 0, 0

    def start(self) -> "RocketboxServer":
        self.app.start(ready=self._ready)
        self.proc = self.app.proc
        if self.metrics_every > 0:
            threading.Thread(target=self._scrape, daemon=True).start()
        return self

    def _scrape(self) -> None:
        url = f"http://127.0.0.1:{config.load(self.conf).metricsPort}/metrics"
        while not self.scraping.wait(self.metrics_every):
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    r.read()
                self.scrapes += 1
            except OSError:
                if not self.scraping.is_set():      # (not the appliance stopping)
                    self.scrape_failures += 1

    def _ready(self) -> None:
        self.app.wait_serving()
        create_topic(self.port, TOPIC, QUEUES)

    def prepare_consume(self) -> None:
        pass

    def cpu(self) -> dict[str, float]:
        return self.app.role_cpu()

    def stop(self) -> None:
        self.scraping.set()
        self.app.stop()


class RocketMQServer:
    """The real Apache RocketMQ 4.9.8 (``ROCKETMQ_HOME``'s ``rmq``): a name server and a broker
    with the same flush mode, 1 GiB heap, store in a temp dir; the load goes to the broker's port
    as to rocketbox's, with the same frames."""
    name = "rocketmq"

    def __init__(self, mode: str, base: str, port: int, home: str, extra: str = ""):
        """``extra``: more broker.conf lines."""
        self.dir = tempfile.mkdtemp(prefix=f"rmq-e2e-{mode}-", dir=base)
        self.port, self.mode, self.rmq, self.extra = port, mode, os.path.join(home, "rmq"), extra
        self.procs: list[subprocess.Popen] = []

    def start(self) -> "RocketMQServer":
        ns_port = self.port + 50
        conf = os.path.join(self.dir, "broker.conf")
        with open(conf, "w") as f:
            f.write(f"brokerClusterName=DefaultCluster\nbrokerName=bench\nbrokerId=0\nbrokerIP1=127.0.0.1\n"
                    f"listenPort={self.port}\nnamesrvAddr=127.0.0.1:{ns_port}\nflushDiskType={self.mode}\n"
                    f"storePathRootDir={self.dir}/store\nstorePathCommitLog={self.dir}/store/commitlog\n"
                    f"autoCreateTopicEnable=true\nautoCreateSubscriptionGroup=true\n{self.extra}")
        log = open(os.path.join(self.dir, "java.log"), "wb")
        self.procs.append(subprocess.Popen([self.rmq, "namesrv", str(ns_port), os.path.join(self.dir, "ns")],
                                           stdout=log, stderr=subprocess.STDOUT))
        wait_port(ns_port, self.procs[0], "RocketMQ name server", timeout=60)
        self.procs.append(subprocess.Popen([self.rmq, "broker", conf, self.dir], stdout=log, stderr=subprocess.STDOUT))
        wait_port(self.port, self.procs[1], "RocketMQ broker", timeout=90)
        deadline = time.monotonic() + 60
        while True:                               # the broker answers before its services are all up
            try:
                create_topic(self.port, TOPIC, QUEUES)
                return self
            except (RuntimeError, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def prepare_consume(self) -> None:
        pass

    def cpu(self) -> dict[str, float]:
        return {name: sum(psutil.Process(p.pid).cpu_times()[:2])
                for name, p in zip(("namesrv", "broker"), self.procs) if p.poll() is None}

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def create_topic_command(topic: str, queues: int, opaque: int = 0) -> Command:
    """UPDATE_AND_CREATE_TOPIC as an admin tool sends it."""
    return Command(R.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
        "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}, opaque=opaque)


def create_topic(port: int, topic: str, queues: int) -> None:
    """As an admin tool would: UPDATE_AND_CREATE_TOPIC through HAProxy on ``port``."""
    resp = _call(port, create_topic_command(topic, queues))
    if resp.code != 0:
        raise RuntimeError(f"creating {topic} failed: {resp.code} {resp.remark}")


def _call(port: int, cmd: Command) -> Command:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(codec.encode(cmd))
        dec = codec.Decoder()
        while True:
            for resp in dec.feed(s.recv(1 << 16)):
                return resp


class RedisServer:
    name = "redis"

    def __init__(self, fsync: str, base: str, port: int, binary: str):
        self.dir = tempfile.mkdtemp(prefix=f"redis-e2e-{fsync}-", dir=base)
        self.port, self.fsync, self.binary = port, fsync, binary

    def start(self) -> "RedisServer":
        self.proc = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                                      "--appendonly", "yes", "--appendfsync", self.fsync, "--save", "",
                                      "--daemonize", "no", "--logfile", os.path.join(self.dir, "redis.log")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_port(self.port, self.proc, "redis-server")
        return self

    def prepare_consume(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            s.sendall(Redis._cmd(b"XGROUP", b"CREATE", b"bench", b"g", b"0"))
            if not s.recv(100).startswith(b"+OK"):
                raise RuntimeError("XGROUP CREATE failed")

    def cpu(self) -> dict[str, float]:
        return {"redis-server": sum(psutil.Process(self.proc.pid).cpu_times()[:2])}

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------- main
PAIRS = {"ASYNC_FLUSH": "everysec", "SYNC_FLUSH": "always"}


def load_arguments(doc: str) -> argparse.ArgumentParser:
    """The options of the load (``run_load``'s ``args``) and of the Redis beside it, shared by
    the benchmarks that drive both with this generator."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5, help="measured seconds per row")
    ap.add_argument("--warmup", type=float, default=1)
    ap.add_argument("--procs", type=int, default=2, help="load generator processes")
    ap.add_argument("--conns", type=int, default=4, help="connections per generator process")
    ap.add_argument("--window", type=int, default=16, help="requests in flight per connection (single sends)")
    ap.add_argument("--rate", type=float, default=20000, help="msgs/s of the paced latency row")
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--redis-server", default=shutil.which("redis-server") or "/usr/bin/redis-server")
    ap.add_argument("--dir", default=None, help="where the stores go (default: system temp dir)")
    return ap


def main() -> None:
    ap = load_arguments(__doc__)
    ap.add_argument("--batch", type=int, default=32, help="messages per batch send")
    ap.add_argument("--batch-window", type=int, default=4, help="batches in flight per connection")
    ap.add_argument("--binary", action="store_true",
                    help="sends with binary (ROCKETMQ) headers; by default JSON, as every real client sends")
    ap.add_argument("--readers", type=int, default=2, help="rocketbox readerProcessNums")
    ap.add_argument("--modes", default="ASYNC_FLUSH,SYNC_FLUSH", help="comma-separated: " + ", ".join(PAIRS))
    ap.add_argument("--port", type=int, default=29100,
                    help="rocketbox listenPort (readers above it); RocketMQ +200 (its name server +250); redis +100")
    ap.add_argument("--rocketmq", default=ROCKETMQ_HOME, help="the Apache RocketMQ 4.9.8 build (its rmq script)")
    ap.add_argument("--no-rocketmq", action="store_true", help="leave the real RocketMQ out")
    ap.add_argument("--rocketmq-warmup", type=float, default=8,
                    help="RocketMQ's warm-up per row, for its JIT (at least 8 s for figures worth quoting)")
    ap.add_argument("--box-seconds", type=float, default=2, help="bench.hiccups' CPU steadiness check first (0: skip)")
    ap.add_argument("--no-grpc", action="store_true", help="leave out the gRPC rows (RocketMQ 5.x's protocol, rocketbox only)")
    ap.add_argument("--grpc-client-threads", type=int, default=8, help="threads of the official 5.x client's gRPC row")
    ap.add_argument("--metrics-every", type=float, default=1.0,
                    help="seconds between scrapes of rocketbox's /metrics during its rows (0: no metrics role)")
    args = ap.parse_args()
    unknown = [m for m in args.modes.split(",") if m not in PAIRS]
    if unknown:
        ap.error(f"--modes: unknown flush mode {', '.join(unknown)} (known: {', '.join(PAIRS)})")
    if not os.path.exists(args.redis_server):
        sys.exit("bench.e2e: redis-server not found (apt-get install redis-server, or --redis-server PATH)")
    with_rmq = not args.no_rocketmq
    if with_rmq and (not os.path.exists(os.path.join(args.rocketmq, "rmq")) or shutil.which("java") is None):
        sys.exit(f"bench.e2e: no Apache RocketMQ 4.9.8 at {args.rocketmq} (its rmq script) or no java on PATH; "
                 f"--rocketmq DIR, or --no-rocketmq")
    redis_version = subprocess.run([args.redis_server, "--version"], capture_output=True, text=True).stdout.strip()
    with_grpc = not args.no_grpc and os.path.isdir(os.path.join(v2.default_dir(), "rocketmq", "v5"))
    print(f"# e2e benchmark: body={args.body}B seconds={args.seconds} warmup={args.warmup} procs={args.procs} "
          f"conns/proc={args.conns} window={args.window} batch={args.batch}x{args.batch_window} rate={args.rate:.0f} "
          f"readers={args.readers} send-headers={'ROCKETMQ' if args.binary else 'JSON'} "
          f"metrics={f'scraped every {args.metrics_every:g} s' if args.metrics_every > 0 else 'off'} "
          f"grpc={f'{v2.PROTOCOL} client-threads={args.grpc_client_threads}' if with_grpc else 'off'} cpus={os.cpu_count()} "
          f"store={args.dir or tempfile.gettempdir()}")
    print(f"# {redis_version}; appendonly yes; " + (f"Apache RocketMQ 4.9.8 ({args.rocketmq}), 1 GiB heap, "
                                                   f"warm-up {max(args.warmup, args.rocketmq_warmup):g} s per row; "
                                                   if with_rmq else "") + "load generator and servers share this box")
    if args.box_seconds > 0:
        box = hiccups.measure(args.box_seconds)
        print(f"# box: bench.hiccups median chunk {box['median_chunk_us']:.0f} us CPU over {args.box_seconds:g} s, "
              f"{box['windows']} slow windows, worst chunk {box['worst_slowdown']:.1f}x its median; "
              f"{hiccups.describe_reclaim(hiccups.host_reclaim())}")
    names = ["rocketbox", *(["rocketmq"] if with_rmq else []), "redis"]
    print(f"{'row':<40} " + " ".join(f"{n:>10}" for n in names) + (f" {'rbx/rmq':>7}" if with_rmq else "")
          + f" {'rbx/redis':>9}   latency ms p50/p99/p99.9 " + " | ".join(names))
    body = os.urandom(args.body)
    header = codec.ROCKETMQ if args.binary else codec.JSON
    for mode in args.modes.split(","):
        fsync = PAIRS[mode]
        rows: dict = collections.defaultdict(dict)
        servers = [RocketboxServer(mode, args.dir, args.port, args.readers, args.metrics_every, grpc=with_grpc)]
        grpc_rows: dict = {}
        if with_rmq:
            servers.append(RocketMQServer(mode, args.dir, args.port + 200, args.rocketmq))
        servers.append(RedisServer(fsync, args.dir, args.port + 100, args.redis_server))
        for server in servers:
            server.start()
            run_args = argparse.Namespace(**vars(args))
            if server.name == "rocketmq":
                run_args.warmup = max(args.warmup, args.rocketmq_warmup)
            try:
                proto = server.name
                if proto == "redis":
                    single, batch = (Redis.send_frames(body, n) for n in (1, args.batch))
                else:
                    single, batch = (Rocketbox.send_frames(body, n, header) for n in (1, args.batch))
                rows["send single"][proto] = with_cpu(server, run_load, proto, server.port, single, run_args,
                                                      args.window)
                rows[f"send batch of {args.batch}"][proto] = with_cpu(server, run_load, proto, server.port, batch,
                                                                      run_args, args.batch_window)
                rows[f"send single at {args.rate:.0f}/s"][proto] = with_cpu(
                    server, run_load, proto, server.port, single, run_args, args.window, rate=args.rate)
                server.prepare_consume()
                rows["consume"][proto] = with_cpu(server, run_consume, server, args)
                if isinstance(server, RocketboxServer) and server.grpc_endpoint:
                    from bench import grpc as grpc_bench  # (it imports this module: here, not at the top)
                    run_args.client_threads = args.grpc_client_threads
                    grpc_rows["gRPC send single (raw)"] = with_cpu(server, grpc_bench.run_grpc,
                                                                           server.grpc_endpoint, run_args)
                    grpc_rows["gRPC send (5.x Python client)"] = with_cpu(server, grpc_bench.run_client,
                                                                         server.grpc_endpoint, run_args)
            finally:
                server.stop()
        for row, r in rows.items():
            rate = {n: r[n]["msgs_per_s"] for n in names}
            ratios = (f" {rate['rocketbox'] / max(rate['rocketmq'], 1):>7.2f}" if with_rmq else "") + \
                f" {rate['rocketbox'] / max(rate['redis'], 1):>9.2f}"
            lat = ""
            if "p50" in r["rocketbox"]:
                lat = " | ".join(f"{r[n]['p50']:.2f}/{r[n]['p99']:.2f}/{r[n]['p999']:.2f}" for n in names)
            errs = "".join(f"  errors {k}: {v['errors']}" for k, v in r.items() if v.get("errors"))
            print(f"{mode + ' ' + row:<40} " + " ".join(f"{rate[n]:>10.0f}" for n in names) + ratios
                  + f"   {lat}{errs}", flush=True)
            print("#   CPU µs/msg " + " | ".join(
                f"{name}: " + " ".join(f"{k} {v:.1f}" for k, v in sorted(r[name]["cpu"].items()) if v >= 0.05)
                + f" ({r[name]['cpu_pct']:.0f}% of a core; load generator {r[name]['gen_pct']:.0f}%)"
                for name in names), flush=True)
        remoting = rows["send single"]["rocketbox"]["msgs_per_s"]
        for row, r in grpc_rows.items():              # rocketbox alone: RocketMQ 4.9.8 and Redis have no gRPC front
            print(f"{mode + ' ' + row:<40} {r['msgs_per_s']:>10.0f}   {r['p50']:.2f}/{r['p99']:.2f}/{r['p999']:.2f}"
                  f"   (rocketbox only; its remoting send single: {remoting:.0f} msgs/s, "
                  f"{remoting / max(r['msgs_per_s'], 1):.1f}x)" + (f"  errors: {r['errors']}" if r.get("errors") else ""),
                  flush=True)
            print("#   gRPC CPU µs/msg rocketbox: " + " ".join(f"{k} {v:.1f}" for k, v in sorted(r["cpu"].items()) if v >= 0.05)
                  + f" ({r['cpu_pct']:.0f}% of a core; load generator {r['gen_pct']:.0f}%)", flush=True)
        rbx = servers[0]
        if isinstance(rbx, RocketboxServer) and rbx.metrics_every > 0:
            print(f"#   rocketbox's /metrics (its metrics role): {rbx.scrapes} scrapes answered, "
                  f"{rbx.scrape_failures} failed", flush=True)


if __name__ == "__main__":
    main()
