"""The real Apache RocketMQ 4.9.8 (``../shared/rocketmq-4.9.8``, its ``rmq`` script) for tests that
compare with it or run the same client against it: a broker, with a name server of its own when
asked, in a directory of the test's, on ports of the worker's block (``harness.next_port``)."""
from __future__ import annotations

import os
import shutil
import subprocess
import time

from tests.integration.harness import next_port
from tests.integration.javaclient import RMQ


def missing() -> str | None:
    """Why the real broker cannot run here (None: it can)."""
    if not os.path.exists(RMQ):
        return f"the real RocketMQ 4.9.8 is not at {RMQ}"
    if shutil.which("java") is None:
        return "no java here"
    return None


class RealRocketMQ:
    """``namesrv``: a name server too (the broker registers with it: clients find it by routes);
    else clients talk to the broker directly. ``conf``: more broker.conf keys."""

    def __init__(self, tmp_path, namesrv: bool = False, **conf) -> None:
        self.dir = str(tmp_path / "rmq")
        base = next_port()
        self.port, self.namesrv = base + 10, f"127.0.0.1:{base}" if namesrv else ""
        os.makedirs(self.dir)
        settings = {"brokerClusterName": "DefaultCluster", "brokerName": "real", "brokerId": 0,
                    "brokerIP1": "127.0.0.1", "listenPort": self.port, "storePathRootDir": f"{self.dir}/store",
                    "storePathCommitLog": f"{self.dir}/store/commitlog", "autoCreateTopicEnable": "true",
                    **({"namesrvAddr": self.namesrv} if namesrv else {}), **conf}
        path = os.path.join(self.dir, "broker.conf")
        with open(path, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in settings.items())
        self.log = open(os.path.join(self.dir, "java.log"), "wb")
        self.procs = []
        if namesrv:
            self.procs.append(subprocess.Popen([RMQ, "namesrv", str(base), os.path.join(self.dir, "namesrv")],
                                               stdout=self.log, stderr=subprocess.STDOUT))
        self.procs.append(subprocess.Popen([RMQ, "broker", path, self.dir], stdout=self.log, stderr=subprocess.STDOUT))

    def create_topics(self, topics, queues: int, timeout_s: float = 120) -> RealRocketMQ:
        """Made on the broker as an admin tool makes them, once it answers (the broker's start)."""
        from bench.e2e import create_topic
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                for t in topics:
                    create_topic(self.port, t, queues)
                return self
            except (RuntimeError, OSError):
                assert all(p.poll() is None for p in self.procs) and time.monotonic() < deadline, \
                    f"the real broker did not start: {self.log_tail()}"
                time.sleep(0.5)

    def registered(self, timeout_s: float = 120) -> RealRocketMQ:
        """Once the name server routes TBW102 to the broker (it registers every 30 s, first at its start)."""
        from bench.e2e import _call
        from rocketbox.remoting.codec import Command
        from rocketbox.remoting.codes import RequestCode as R
        deadline, port = time.monotonic() + timeout_s, int(self.namesrv.rpartition(":")[2])
        while True:
            try:
                if _call(port, Command(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})).code == 0:
                    return self
            except OSError:
                pass
            assert all(p.poll() is None for p in self.procs) and time.monotonic() < deadline, \
                f"the real broker did not register: {self.log_tail()}"
            time.sleep(0.5)

    def log_tail(self) -> str:
        with open(os.path.join(self.dir, "java.log"), "rb") as f:
            return f.read()[-3000:].decode(errors="replace")

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
