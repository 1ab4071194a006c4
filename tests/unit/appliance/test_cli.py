"""The CLI as people pipe it."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_status_into_a_closed_pipe_exits_without_a_traceback(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={tmp_path}/store\nlistenPort=24990\nshmPrefix=/rbxcli-{os.getpid()}\n")
    r, w = os.pipe()
    os.close(r)                                   # like `| head` that has already exited
    p = subprocess.run([sys.executable, "-m", "rocketbox.appliance", "status", "-c", str(conf)], stdout=w,
                       stderr=subprocess.PIPE, cwd=ROOT, timeout=60)
    os.close(w)
    assert p.returncode == 1
    assert b"Traceback" not in p.stderr and b"BrokenPipe" not in p.stderr, p.stderr.decode()
