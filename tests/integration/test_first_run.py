"""The first ten minutes, as a newcomer meets them: ``appliance start`` says when it is ready and a
produce right after that works; the store's disk use follows its data; a locked store is a start-up
error (exit 2); ``produce`` on a terminal says how it reads and stops at one Ctrl-C; ``consume``
cuts long bodies for display."""
from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time

from rocketbox.client.cli import shown_body
from tests.integration.harness import ROOT

DEFAULT_SIZES = {"mappedFileSizeCommitLog": 1 << 30, "mappedFileSizeConsumeQueue": 6_000_000,
                 "maxHashSlotNum": 5_000_000, "maxIndexNum": 20_000_000}


def _disk_use(root: str) -> tuple[int, int]:
    """(bytes on disk, apparent bytes) of every file under ``root``."""
    used = apparent = 0
    for d, _dirs, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(d, name))
            used, apparent = used + st.st_blocks * 512, apparent + st.st_size
    return used, apparent


def test_ready_line_then_a_new_topic_takes_a_message_and_the_stop_says_it_stopped_cleanly(appliance_factory):
    app = appliance_factory(namesrv=True, **DEFAULT_SIZES)
    app.start()                                  # returns at the ready line, not by polling the broker
    r = app.cmd("produce", "-t", "BrandNew", "first")
    assert r.returncode == 0 and r.stdout.startswith("SEND_OK msgId="), (r.stdout, r.stderr)
    ready = [line for line in app.log_text().splitlines() if line.startswith("rocketbox ready: ")]
    assert len(ready) == 1
    assert f"at 127.0.0.1:{app.cfg.listenPort} (name server {app.namesrv})" in ready[0], ready
    assert f"store {app.cfg.root}" in ready[0] and "roles nameserver flusher" in ready[0] and "haproxy" in ready[0]

    r = app.cmd("produce", "-t", "BrandNew", *[f"m{i}" for i in range(16)])
    assert r.returncode == 0 and r.stdout.count("SEND_OK") == 16
    used, apparent = _disk_use(app.cfg.root)
    assert apparent > 1 << 30                    # the files have RocketMQ's sizes ...
    assert used < 16 << 20, used                 # ... and the disk holds what was written, not 1.5 GB

    again = subprocess.run([sys.executable, "-m", "rocketbox.appliance", "start", "-c", app.conf], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "is locked by another running appliance" in again.stderr, again.stderr

    assert app.ctrl_c() == 0
    last = app.log_text().splitlines()
    stopped = [line for line in last if line.startswith("rocketbox stopped")]
    assert stopped and stopped[-1].startswith(f"rocketbox stopped cleanly: store {app.cfg.root}"), stopped
    assert not os.path.exists(os.path.join(app.cfg.root, "abort"))


def test_produce_on_a_terminal_says_how_it_reads_and_one_ctrl_c_ends_it(appliance_factory):
    app = appliance_factory(namesrv=True).start()
    pid, fd = pty.fork()
    if pid == 0:                                 # the child: `appliance produce` on a terminal
        os.chdir(ROOT)
        os.execv(sys.executable, [sys.executable, "-m", "rocketbox.appliance", "produce", "-t", "Typed", "-c", app.conf])
    said = bytearray()

    def read_until(text: bytes, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in said and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    said.extend(os.read(fd, 4096))
                except OSError:
                    return
    try:
        read_until(b"until Ctrl-D", 30)
        assert b"reading one message per line until Ctrl-D (Ctrl-C stops at once)" in said, bytes(said)
        os.write(fd, b"typed line\n")
        read_until(b"SEND_OK", 30)
        assert b"SEND_OK msgId=" in said, bytes(said)
        t0 = time.monotonic()
        os.write(fd, b"\x03")                    # Ctrl-C, through the terminal
        _, status = os.waitpid(pid, 0)
        took = time.monotonic() - t0
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0 and took < 5, (status, took)


def test_consume_cuts_long_bodies_for_display_with_a_marker():
    assert shown_body(b"short", 200) == "short"
    assert shown_body(b"x" * 4 * 1024 * 1024, 200) == "x" * 200 + f"...[{4 * 1024 * 1024 - 200} more bytes, " \
                                                                f"{4 * 1024 * 1024} in all]"
    assert shown_body(b"y" * 300, 0) == "y" * 300
