"""Per-message cost of the send path (or, with ``--pull``, the pull path) in one process, away from
the noise of a shared box.

The reader's side runs for real: a ``net.server`` connection is fed the pipelined frames
``bench.e2e`` sends (16 single sends per read, or 4 batches of 32; ``--per-read 1`` for a lone
request, as at low rates), then SendProcessor and WriterLink with its slab and pipe waker, against
a real writer and dispatcher, each stepped in a thread of its own on the same shared memory and
files (the in-process store of the writer tests; the dispatcher steps after every read, so its
figure at one request per read is not what pacing gives live).  The socket is the one stand-in: replies go to a
transport that counts them.

Prints CPU µs per message, the median over rounds, for the reader (frame in to reply out), the
writer pass and the dispatcher pass.  ``--instructions`` runs itself twice under valgrind's
callgrind (two round counts; the difference is the steady state) and prints instructions per
message for each of the three threads: the same figure on every run, so a change of a few percent
shows, which this VM's ±20% timing noise hides.

``--pull``: the store is first filled through the same send path with single sends to each of the
8 queues in turn (a queue's records are never adjacent in the CommitLog: each pulled record is a
piece of its own, as when many producers share a broker) or, with ``--batch 32``, with batches of
32 to each queue (a pull's records are one run); then each round one read brings a PULL_MESSAGE
of 32 for every queue (``bench.e2e``'s consumer's requests) to a reader connection; the reader's
CPU (or instructions) per message pulled, from frame in to responses out.  The last round's
responses are read back in full and checked.

    .venv/bin/python -m bench.paths [--batch 1|32] [--json] [--per-read N] [--rounds 400] [--pull] [--instructions]
"""
from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from bench.e2e import QUEUES, TOPIC, Rocketbox
from rocketbox.appliance.inprocess import running_store, small_config
from rocketbox.appliance.process import set_up
from rocketbox.net.server import Connection, RemotingServer
from rocketbox.readers.pull import PullProcessor
from rocketbox.readers.send import SendProcessor
from rocketbox.remoting import codec
from rocketbox.shm.context import ReaderContext
from rocketbox.shm.layout import C
from rocketbox.store import message
from rocketbox.writer.topics import topic_config

WARMUP_ROUNDS = 5


class _Transport:
    """Where the connection's replies go: counted (the last write kept), not sent."""

    def __init__(self):
        self.writes = self.bytes = 0
        self.last = []

    def write(self, data) -> None:
        self.writes += 1
        self.bytes += len(data)
        self.last = [data]

    def writelines(self, pieces) -> None:
        """uvloop's writev of the pieces as they are: kept (joined only where they are read back)."""
        self.writes += 1
        self.bytes += sum(map(len, pieces))
        self.last = pieces

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, _name):
        return ("127.0.0.1", 40000)

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        """Nothing is ever buffered here, so the connection's read pausing never starts."""


def _frames(batch: int, use_json: bool, per_read: int) -> bytes:
    frames = [f for f, _n, _r in Rocketbox.send_frames(os.urandom(1024), batch)]
    return b"".join(_in_json(frames[i % len(frames)]) if use_json else frames[i % len(frames)] for i in range(per_read))


def _in_json(frame: bytes) -> bytes:
    (cmd,) = codec.Decoder().feed(frame)
    cmd.serialize_type = codec.JSON
    return codec.encode(cmd)


def _connection(handlers: dict) -> tuple[Connection, "_Transport"]:
    conn = Connection(RemotingServer("paths", handlers))
    conn.head = None                         # no PROXY header in front
    transport = _Transport()
    conn.connection_made(transport)
    return conn, transport


def measure(batch: int, use_json: bool, rounds: int, base: str | None, per_read: int, pull: bool = False,
            fill: int | None = None) -> dict:
    """``pull``: the consume path instead, after ``fill`` rounds (default: enough) of batches."""
    root = tempfile.mkdtemp(prefix="rbx-paths-", dir=base)
    cfg = small_config(root, "paths", mappedFileSizeCommitLog=1 << 28, maxMessageSize=4 << 20,
                       ringRequestBytes=16 << 20, maxIndexNum=5_000_000, maxHashSlotNum=500_000, shmQueueSlots=1024)
    try:
        # the steppers' threads first: threads 2 and 3 under callgrind, whatever threads the store
        # starts and ends later (a file thread that had not quite ended took number 2 at times)
        writer = _Stepper("the writer found no slab")
        dispatcher = _Stepper("the dispatcher found nothing written")
        with running_store(cfg) as (sh, w, d, _c):
            w.topics.upsert(topic_config(TOPIC, QUEUES, QUEUES))
            w.topics.close()
            writer.attach(w)
            dispatcher.attach(d)

            async def run() -> dict:
                reader = ReaderContext(cfg, sh).open_context()    # its group_exists: as with autoCreateSubscriptionGroup
                try:
                    if pull:
                        return await _pulls(sh, reader, writer, dispatcher, batch, use_json, rounds,
                                            fill or WARMUP_ROUNDS + rounds)
                    return await _sends(reader, writer, dispatcher, _frames(batch, use_json, per_read), rounds,
                                        per_read * batch)
                finally:
                    reader.close_context()
                    writer.close()
                    dispatcher.close()

            import uvloop
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                return runner.run(run())
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _sends(reader_ctx, writer, dispatcher, blob: bytes, rounds: int, msgs: int) -> dict:
    """The send path: ``blob`` (``msgs`` messages) fed to a reader connection per round, a writer
    pass and a dispatcher pass, then the replies; CPU per message of each."""
    conn, transport = _connection(SendProcessor(reader_ctx).handlers())
    reader, w_cpu, d_cpu = [], [], []
    for r in range(WARMUP_ROUNDS + rounds):
        t0 = time.thread_time()
        conn.data_received(blob)
        await _turns(2)              # the loop turn's sends are encoded, then their slab is pushed
        t1 = time.thread_time()
        w_cpu.append(writer.step())
        d_cpu.append(dispatcher.step())
        t2 = time.thread_time()
        reader_ctx.settle()          # the writer's replies, then the responses
        await asyncio.sleep(0)
        t3 = time.thread_time()
        if r >= WARMUP_ROUNDS:
            reader.append((t1 - t0) + (t3 - t2))
    want = WARMUP_ROUNDS + rounds
    if transport.writes != want:
        raise RuntimeError(f"{transport.writes} reply writes for {want} reads: a send went unanswered")
    med = {name: sorted(cpu)[len(cpu) // 2] / msgs * 1e6
           for name, cpu in (("reader_us", reader), ("writer_us", w_cpu[WARMUP_ROUNDS:]),
                             ("dispatcher_us", d_cpu[WARMUP_ROUNDS:]))}
    return {**med, "writer_dispatcher_us": med["writer_us"] + med["dispatcher_us"], "msgs_per_round": msgs}


async def _pulls(sh, reader_ctx, writer, dispatcher, batch: int, use_json: bool, rounds: int, fill: int) -> dict:
    """The consume path: ``fill`` rounds of 32 messages to each of the 8 queues (a batch of 32
    to each, or 32 times a single send to each in turn, so that no two records of a queue are
    adjacent), then per round one PULL_MESSAGE of 32 per queue in one read, as ``bench.e2e``'s
    consumer sends them; the reader's CPU per message pulled (frame in to response out)."""
    if fill < WARMUP_ROUNDS + rounds:
        raise ValueError(f"--fill {fill} leaves too few messages for {rounds} rounds")
    sends, _ = _connection(SendProcessor(reader_ctx).handlers())
    to_each = _frames(batch, use_json, QUEUES)       # one request to each queue
    for _ in range(fill * 32 // batch):
        sends.data_received(to_each)
        await _turns(2)
        writer.step()
        while sh.control[C.DISPATCHED] < sh.control[C.WRITTEN]:
            dispatcher.step()
        reader_ctx.settle()
        await asyncio.sleep(0)
    conn, transport = _connection(PullProcessor(reader_ctx).handlers())
    queues = range(QUEUES)
    per_round = 32 * QUEUES
    cpu = []
    # the pulls of every round the store holds, encoded first: as many in both of ``instructions``'
    # runs, so the encoding is not counted as the reader's
    blobs = [b"".join(_in_json(f) if use_json else f for f in (Rocketbox.pull_frame(q, r * 32) for q in queues))
             for r in range(fill)]
    for r, blob in enumerate(blobs[:WARMUP_ROUNDS + rounds]):
        t0 = time.thread_time()
        conn.data_received(blob)
        await asyncio.sleep(0)                   # the responses go out
        cpu.append(time.thread_time() - t0)
        if transport.writes != r + 1 or transport.bytes < (r + 1) * per_round * 1024:
            raise RuntimeError(f"round {r}: {transport.writes} writes of {transport.bytes} bytes in all")
    got = codec.Decoder().feed(b"".join(transport.last))   # the last round's responses, read in full
    counts = [len(message.decode_records(c.body)) for c in got if c.code == 0]
    if counts != [32] * len(queues):
        raise RuntimeError(f"the last round's pulls found {counts} messages")
    return {"reader_us": sorted(cpu[WARMUP_ROUNDS:])[rounds // 2] / per_round * 1e6, "msgs_per_round": per_round}


async def _turns(n: int) -> None:
    """Let the loop come round ``n`` times (what the reader's ``call_soon``s wait for)."""
    for _ in range(n):
        await asyncio.sleep(0)


class _Stepper:
    """A thread that runs ``service.step()`` (the writer's or the dispatcher's) when told to and
    reports its CPU time.  The hand-offs are C queues, so the harness adds little to any thread's
    instruction count (a thread pool's futures cost the reader's thread ~30k per round)."""

    def __init__(self, idle: str):
        self.inbox, self.outbox = queue.SimpleQueue(), queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, args=(idle,), daemon=True)
        self.thread.start()

    def attach(self, service) -> None:
        """What the thread steps (made after the thread, so that the thread's number is fixed)."""
        self.inbox.put(service)

    def _run(self, idle: str) -> None:
        service = self.inbox.get()
        if service is False:                    # closed before a service came
            return
        while self.inbox.get():
            t0 = time.thread_time()
            try:
                if not service.step():
                    raise RuntimeError(idle)
                self.outbox.put(time.thread_time() - t0)
            except Exception as e:
                self.outbox.put(e)

    def step(self) -> float:
        self.inbox.put(True)
        got = self.outbox.get()
        if isinstance(got, Exception):
            raise got
        return got

    def close(self) -> None:
        self.inbox.put(False)
        self.thread.join()


def instructions(args) -> dict:
    """Instructions per message of the reader's, the writer's and the dispatcher's threads (callgrind
    numbers threads in creation order: 1, 2, 3; any other thread would count as the dispatcher's),
    from two callgrind runs.  With ``--pull`` both runs fill the store alike, so only the reader's
    pulls differ between them: its figure alone is given."""
    if not shutil.which("valgrind"):
        sys.exit("bench.paths: --instructions needs valgrind (apt-get install valgrind)")
    out_dir = tempfile.mkdtemp(prefix="rbx-paths-cg-", dir=args.dir)
    totals = {}
    if args.pull:
        runs, per_round = (10, 30), 32 * QUEUES
    else:
        scale = max(1, 16 // (args.per_read * args.batch))      # at least 640 messages between the two runs
        runs, per_round = (20 * scale, 60 * scale), args.per_read * args.batch
    try:
        for rounds in runs:
            out = os.path.join(out_dir, f"cg.{rounds}")
            cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}",
                   sys.executable, "-m", "bench.paths", "--batch", str(args.batch), "--rounds", str(rounds),
                   "--per-read", str(args.per_read)]
            if args.json:
                cmd.append("--json")
            if args.pull:
                cmd += ["--pull", "--fill", str(WARMUP_ROUNDS + runs[-1])]
            if args.dir:
                cmd += ["--dir", args.dir]
            subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
                           cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            per_thread = {}
            for path in glob.glob(out + "-*"):
                with open(path) as f:
                    per_thread[path.rsplit("-", 1)[1]] = next(int(line.split()[1]) for line in f
                                                              if line.startswith("summary:"))
            totals[rounds] = (per_thread.pop("01"), per_thread.pop("02"), sum(per_thread.values()))
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    (r0, w0, d0), (r1, w1, d1) = totals.values()
    msgs = (runs[1] - runs[0]) * per_round
    if args.pull:
        return {"reader_instructions": (r1 - r0) / msgs}
    return {"reader_instructions": (r1 - r0) / msgs, "writer_instructions": (w1 - w0) / msgs,
            "dispatcher_instructions": (d1 - d0) / msgs, "writer_dispatcher_instructions": (w1 + d1 - w0 - d0) / msgs}


def main() -> None:
    set_up()            # the roles' code runs in this process: set it up as a role's (glibc malloc's thresholds)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1, choices=(1, 32), help="single sends, or batches of 32")
    ap.add_argument("--json", action="store_true", help="JSON headers (as Java clients send) instead of ROCKETMQ")
    ap.add_argument("--rounds", type=int, default=400, help="reads fed to the connection")
    ap.add_argument("--per-read", type=int, default=None,
                    help="requests per read (default 16 single sends or 4 batches; 1 = a lone request, as at low rates)")
    ap.add_argument("--instructions", action="store_true", help="count instructions under valgrind instead")
    ap.add_argument("--dir", default=None, help="where the store goes (default: system temp dir)")
    ap.add_argument("--pull", action="store_true",
                    help="the consume path instead: a PULL_MESSAGE of 32 to each of the 8 queues per read")
    ap.add_argument("--fill", type=int, default=None, help=argparse.SUPPRESS)   # --pull: rounds stored first
    args = ap.parse_args()
    if args.per_read is None:
        args.per_read = 16 if args.batch == 1 else 4
    headers = "JSON" if args.json else "ROCKETMQ"
    if args.pull:
        stored = "single sends to each queue in turn" if args.batch == 1 else "batches of 32"
        what, shape = "pull path", f"{QUEUES} pulls of 32 per read headers={headers} body=1024B stored as {stored}"
    else:
        what, shape = "send path", f"batch={args.batch} headers={headers} body=1024B per_read={args.per_read}"
    if args.instructions:
        res = instructions(args)
        print(f"# {what}, instructions per message: {shape}")
        print("   ".join(f"{role} {res[role + '_instructions']:,.0f}" for role in ("reader", "writer", "dispatcher")
                         if role + "_instructions" in res))
    else:
        res = measure(args.batch, args.json, args.rounds, args.dir, args.per_read, args.pull, args.fill)
        print(f"# {what}, CPU per message (median of {args.rounds} rounds): {shape}")
        print("   ".join(f"{role} {res[role + '_us']:.1f} us" for role in ("reader", "writer", "dispatcher")
                         if role + "_us" in res))
    print("# " + json.dumps({"pull": args.pull, "batch": args.batch, "json": args.json, **res}))


if __name__ == "__main__":
    main()
