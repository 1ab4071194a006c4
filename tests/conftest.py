"""Session guard: nothing a test process created may stay in /dev/shm.  Every fixture unlinks
its own segments; this catches what an interrupted teardown left, removes it and says so.
Also ``tmpfs``, a small real file system for the full-disk tests."""
import os
import subprocess

import pytest


@pytest.fixture(scope="session", autouse=True)
def no_shared_memory_left_behind():
    yield
    mine = f"-{os.getpid()}"
    left = [n for n in os.listdir("/dev/shm") if n.startswith(("rbx", "sem.rbx")) and mine in n]
    for n in left:
        os.unlink(os.path.join("/dev/shm", n))
    if left:
        print(f"\nWARNING: removed {len(left)} shared-memory objects left by this test run: {left[:4]}")


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size)``: a real small tmpfs of ``size`` (e.g. "3m") mounted for the test, for full
    disks; skips where mounting needs root this process does not have."""
    mounted = []

    def mount(size: str):
        mnt = tmp_path / f"fs{len(mounted)}"
        mnt.mkdir()
        if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                                               capture_output=True).returncode != 0:
            pytest.skip("needs root to mount a small tmpfs")
        mounted.append(mnt)
        return mnt

    yield mount
    for mnt in mounted:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
