"""Runs the real Apache RocketMQ 4.9.8 Java client (``../shared/rocketmq-4.9.8``, its ``rmq``
script) for the integration tests: the programs in ``tests/integration/java/`` are compiled once
per session against the client's jars, and each is run in a JVM of its own."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess

from tests.integration.harness import ROOT

RMQ = os.path.normpath(os.path.join(ROOT, "..", "shared", "rocketmq-4.9.8", "rmq"))
SOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java")


def missing() -> str | None:
    """Why the Java client cannot run here, or None."""
    if not os.path.exists(RMQ):
        return f"the real RocketMQ 4.9.8 is not at {RMQ}"
    if shutil.which("java") is None or shutil.which("javac") is None:
        return "no JDK (java, javac) on PATH"
    return None


def compile_all(out_dir: str) -> str:
    """Compile every program in ``java/`` into ``out_dir``; returns it."""
    subprocess.run([RMQ, "javac", "-d", out_dir, *sorted(glob.glob(os.path.join(SOURCES, "*.java")))],
                   check=True, capture_output=True, text=True, timeout=180)
    return out_dir


def run(classes: str, main: str, *args: str, logs: str, timeout: float = 90) -> str:
    """Run ``main`` with ``args``; what it printed.  A non-zero exit raises with its output."""
    env = dict(os.environ, RMQ_CP=classes, RMQ_CLIENT_LOGS=logs)
    p = subprocess.run([RMQ, "java", main, *args], env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{main} exited {p.returncode}:\n{p.stdout}\n{p.stderr[-4000:]}")
    return p.stdout
