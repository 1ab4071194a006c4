"""Starts a real appliance (``python -m rocketbox.appliance start``) in a temp dir with a private shm
prefix, and runs producer processes against it.  Used by the integration and crash tests."""
from __future__ import annotations

import asyncio
import collections
import itertools
import json
import os
import resource
import signal
import subprocess
import sys
import time

import psutil

from rocketbox.appliance import config
from rocketbox.shm.layout import C
from rocketbox.shm.state import SharedState

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# each appliance uses port-2 .. port+30; all below the kernel's ephemeral range (32768+), where a
# client socket could hold the port a restarted HAProxy wants to bind.  Each pytest-xdist worker
# (up to WORKERS) cycles through a block of its own, so two never pick the same ports; name server
# tests use 18876..20375, the benchmarks' tests 29000..31999.
WORKERS, BLOCK = 3, 2800
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
_w = int(_worker[2:]) % WORKERS if _worker.startswith("gw") else os.getpid() % WORKERS
_ports = itertools.cycle(range(20500 + _w * BLOCK, 20500 + (_w + 1) * BLOCK - 40, 40))


def next_port() -> int:
    """The first of a block of ports (port-2 .. port+30) no other test of this run uses now."""
    return next(_ports)


class Appliance:
    def __init__(self, tmp_path, namesrv: bool = False, grpc: bool = False, **overrides):
        """``namesrv``: run a name server of its own (on listenPort + 30) and register with it;
        ``grpc``: the gRPC front too (on listenPort + 33)."""
        self.dir = str(tmp_path)
        self.conf = os.path.join(self.dir, "broker.conf")
        port = next_port()
        settings = {"storePathRootDir": os.path.join(self.dir, "store"), "mappedFileSizeCommitLog": 1024 * 1024,
                    "mappedFileSizeConsumeQueue": 20 * 1000, "maxMessageSize": 64 * 1024,
                    "ringRequestBytes": 1024 * 1024, "ringResponseBytes": 256 * 1024, "listenPort": port,
                    "brokerName": "b1", "brokerIP1": "127.0.0.1", "shmPrefix": f"/rbxt-{os.getpid()}-{port}",
                    "maxHashSlotNum": 1000, "maxIndexNum": 4000, "shmQueueSlots": 1024, "shmTopicSlots": 256,
                    "shmOffsetSlots": 1024, "namesrvAddr": "", "metricsPort": port + 31}
        if namesrv:
            settings["namesrvAddr"] = f"127.0.0.1:{port + 30}"
        settings["grpcListenPort"] = port + 33 if grpc else 0
        settings.update(overrides)
        with open(self.conf, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in settings.items())
        self.cfg = config.load(self.conf)
        self.proc: subprocess.Popen | None = None
        self.log = open(os.path.join(self.dir, "appliance.log"), "ab")

    def cmd(self, *args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rocketbox.appliance", *args, "-c", self.conf],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)

    def start(self, timeout: float = 20, nofile: int | None = None) -> "Appliance":
        """Start, and return once the appliance printed its ready line (every role up, every
        listener accepting, the broker registered with its name server). ``nofile``: its
        processes' descriptor limit (``ulimit -n``, soft and hard)."""
        self.log.flush()
        mark = os.path.getsize(self.log.name)
        limit = None if nofile is None else (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)))
        self.proc = subprocess.Popen([sys.executable, "-m", "rocketbox.appliance", "start", "-c", self.conf], cwd=ROOT,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=limit)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"appliance exited with {self.proc.returncode}: {self.log_text()[-2000:]}")
            with open(self.log.name, "rb") as f:
                f.seek(mark)
                if b"\nrocketbox ready: " in b"\n" + f.read():
                    return self
            time.sleep(0.05)
        self.kill9()                     # leave nothing running for the next test
        raise TimeoutError("appliance did not come up: " + self.log_text()[-2000:])

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.cfg.listenPort}"

    @property
    def namesrv(self) -> str:
        return self.cfg.namesrvAddr

    def serving(self) -> bool:
        """Every reader answers, and HAProxy lets a request through."""
        from rocketbox.remoting.codes import RequestCode
        from tests.integration.wire import Wire
        ports = [self.cfg.reader_port(i) for i in range(self.cfg.readerProcessNums)] + [self.cfg.listenPort]
        try:
            for port in ports:
                w = Wire("127.0.0.1", port, timeout=2)
                ok = w.call(RequestCode.GET_BROKER_RUNTIME_INFO).code == 0
                w.close()
                if not ok:
                    return False
            if self.cfg.namesrvAddr:            # and the broker has registered (with the first)
                host, _, port = self.cfg.namesrvAddr.split(";")[0].partition(":")
                w = Wire(host, int(port), timeout=2)
                ok = w.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}).code == 0
                w.close()
                return ok
        except OSError:
            return False
        return True

    def log_text(self) -> str:
        with open(os.path.join(self.dir, "appliance.log"), "rb") as f:
            return f.read().decode(errors="replace")

    def role_pid(self, role: str) -> int:
        with open(os.path.join(self.cfg.run_dir, f"{role}.pid")) as f:
            return int(f.read())

    def stop(self, timeout: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout)
        self.proc = None
        return rc

    def ctrl_c(self, timeout: float = 60) -> int:
        """SIGINT to the appliance's whole process group, as a terminal's Ctrl-C does."""
        os.killpg(self.proc.pid, signal.SIGINT)
        rc = self.proc.wait(timeout)
        self.proc = None
        return rc

    def kill9(self) -> None:
        """Kill the supervisor and every role at once, like a power cut for the processes."""
        procs = [psutil.Process(self.proc.pid)] + psutil.Process(self.proc.pid).children(recursive=True)
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, timeout=10)
        self.proc.wait()
        self.proc = None

    def shared(self) -> SharedState:
        return SharedState(self.cfg.geometry()).attach()

    def cleanup(self) -> None:
        if self.proc is not None:
            try:
                self.kill9()
            except Exception:
                pass
        SharedState(self.cfg.geometry()).unlink()
        self.log.close()


def create_topic(app: Appliance, topic: str, queues: int) -> None:
    """As an admin tool would (UPDATE_AND_CREATE_TOPIC through HAProxy)."""
    from rocketbox.remoting.codes import RequestCode, ResponseCode
    from tests.integration.wire import Wire
    w = Wire("127.0.0.1", app.cfg.listenPort)
    assert w.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
        "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}).code == ResponseCode.SUCCESS
    w.close()


def wait_route(app: Appliance, topic: str) -> None:
    """Until the name server has ``topic``'s route: the broker registers a new topic on its next
    pass (≤ 1 s)."""
    from rocketbox.remoting.codes import RequestCode, ResponseCode
    from tests.integration.wire import Wire
    host, _, port = app.namesrv.partition(":")
    ns, deadline = Wire(host, int(port)), time.monotonic() + 10
    while ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}).code != ResponseCode.SUCCESS:
        assert time.monotonic() < deadline, f"no route for {topic} at the name server"
        time.sleep(0.1)
    ns.close()


async def dispatched(app: Appliance) -> None:
    """Once the dispatcher has caught up with everything written (≤ 10 s): a send is acknowledged
    after its append, and its consume-queue entry follows within a dispatcher pass
    (``dispatchPaceMs``), as RocketMQ's reput follows its CommitLog."""
    sh = app.shared()
    try:
        deadline = time.monotonic() + 10
        while sh.control[C.DISPATCHED] < sh.control[C.WRITTEN] and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    finally:
        sh.close()


async def read_topic(app: Appliance, topic: str) -> list:
    """Every message of ``topic`` in this appliance, each queue read from offset 0 to its end with our
    pull consumer, once everything written is dispatched."""
    await dispatched(app)
    return await pull_all(app.namesrv, topic, app.cfg.brokerName)


async def pull_all(namesrv: str, topic: str, broker_name: str | None = None, group: str = "audit") -> list:
    """Every message of ``topic`` (on ``broker_name`` alone, if given), each queue read from
    offset 0 to its end with our pull consumer, through the name server ``namesrv``; a pull that
    found only entries readers skip (tombstones) moves on, as a consumer does."""
    from rocketbox.client.consumer import PullConsumer
    pc = await PullConsumer(group, namesrv).start()
    out = []
    for mq in await pc.queues(topic):
        if broker_name is not None and mq.broker_name != broker_name:    # another broker's queues
            continue
        await pc.assign([mq])
        pc.seek(mq, 0)
        while (res := await pc.pull(mq, 32)).messages or res.status == "NO_MATCHED_MSG":   # (past tombstones)
            out += res.messages
    await pc.shutdown()
    return out


def producer_cmd(app: Appliance, name: str, topic: str, count: int, queues: int, ack_file: str,
                 sync_wait: bool = False, batch: int = 1, delay_s: float = 0.0):
    args = {"conf": app.conf, "name": name, "topic": topic, "count": count, "queues": queues,
            "ack_file": ack_file, "sync_wait": sync_wait, "batch": batch, "delay_s": delay_s}
    return [sys.executable, os.path.join(ROOT, "tests", "integration", "producer.py"), json.dumps(args)]


def start_producer(app: Appliance, *a, **kw) -> subprocess.Popen:
    return subprocess.Popen(producer_cmd(app, *a, **kw), cwd=ROOT, stderr=subprocess.PIPE, text=True)


def stored_keys(cfg) -> collections.Counter:
    """How often each producer key is in the store; asserts the store checks clean first."""
    from rocketbox.appliance.check import check
    rep = check(cfg)
    assert rep.clean, rep.problems[:10]
    c = collections.Counter()
    for rows in rep.queues.values():
        for _q, _p, body in rows:
            c[body.decode().split("body-")[1]] += 1
    return c


def read_acks(path: str) -> list[str]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.strip() for line in f if line.endswith("\n")]


def owned(consumer) -> list:
    """The queues a push consumer consumes now, its group's retry topic's left out."""
    return [q for q in consumer.pullers if not q.topic.startswith("%RETRY%")]
