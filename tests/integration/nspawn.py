"""A bare Debian 12 box booted with real systemd, for tests/integration/test_systemd.py.

``debootstrap --variant=minbase`` makes the root filesystem once (with systemd, which a box needs to
boot, and the CA bundle this machine's own pip and apt trust); it is cached in ``CACHE`` between
runs. Each test module boots a copy with ``systemd-nspawn -b`` and runs commands in it with
``nsenter``. The container shares the host's network (apt and pip reach their mirrors; the tests
reach HAProxy), so its broker.conf takes ports of the test's own block.
"""
from __future__ import annotations

import fcntl
import glob
import os
import shutil
import signal
import subprocess
import time

CACHE = os.environ.get("ROCKETBOX_ROOTFS_CACHE", "/var/cache/rocketbox-tests/bookworm-minbase")
MIRROR = "http://deb.debian.org/debian"
PACKAGES = "systemd,systemd-sysv,dbus,ca-certificates"


def missing() -> str | None:
    """Why a container cannot be booted here, or None."""
    if os.geteuid() != 0:
        return "booting a systemd-nspawn container needs root"
    for tool in ("systemd-nspawn", "debootstrap", "nsenter"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            return f"{tool} is not installed (./install.sh --dev installs it)"
    return None


def rootfs() -> str:
    """The cached bare rootfs, made now if missing (~30 s; one maker at a time)."""
    os.makedirs(os.path.dirname(CACHE), exist_ok=True)
    with open(CACHE + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(os.path.join(CACHE, ".complete")):
            return CACHE
        tmp = CACHE + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["debootstrap", "--variant=minbase", f"--include={PACKAGES}", "bookworm", tmp, MIRROR],
                       check=True, capture_output=True, timeout=900)
        # trust what this machine's pip and apt trust (its egress CA), as a box on this network would
        for crt in glob.glob("/usr/local/share/ca-certificates/*.crt"):
            shutil.copy(crt, os.path.join(tmp, "usr/local/share/ca-certificates"))
        subprocess.run(["chroot", tmp, "update-ca-certificates"], check=True, capture_output=True)
        with open(os.path.join(tmp, "etc/pip.conf"), "w") as f:
            f.write("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
        subprocess.run(["chroot", tmp, "apt-get", "clean"], check=True, capture_output=True)
        open(os.path.join(tmp, ".complete"), "w").close()
        shutil.rmtree(CACHE, ignore_errors=True)
        os.rename(tmp, CACHE)
        return CACHE


def _nspawn_runtime_dir() -> None:
    """nspawn keeps its state in /run/systemd/nspawn, which must be a tmpfs; a host whose /run is
    not one (this machine's PID 1 is not systemd) gets one mounted there."""
    d = "/run/systemd/nspawn"
    os.makedirs(d, exist_ok=True)
    if subprocess.run(["mountpoint", "-q", d]).returncode != 0:
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", d], check=True)


class Container:
    def __init__(self, root: str, log_path: str, binds: list[str] = (), ro_binds: list[str] = ()):
        self.root, self.log_path = root, log_path
        self.binds, self.ro_binds = list(binds), list(ro_binds)
        self.proc: subprocess.Popen | None = None
        self.leader = 0

    @classmethod
    def copy_of_rootfs(cls, dest: str, log_path: str, **kw) -> "Container":
        subprocess.run(["cp", "-a", "--reflink=auto", rootfs(), dest], check=True)
        with open(os.path.join(dest, "etc/hostname"), "w") as f:
            f.write("rbxbox\n")
        return cls(dest, log_path, **kw)

    def boot(self, timeout: float = 120) -> "Container":
        _nspawn_runtime_dir()
        cmd = ["systemd-nspawn", "-q", "-D", self.root, "-b", "--register=no", "--keep-unit", "--console=read-only"]
        cmd += [f"--bind={b}" for b in self.binds] + [f"--bind-ro={b}" for b in self.ro_binds]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, f"systemd-nspawn exited {self.proc.returncode}: {self.log_tail()}"
            assert time.monotonic() < deadline, f"the container did not boot: {self.log_tail()}"
            kids = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout.split()
            if kids:
                self.leader = int(kids[0])
                state = self.sh("systemctl is-system-running", check=False).stdout.strip()
                if state in ("running", "degraded"):
                    return self
            time.sleep(0.3)

    def sh(self, script: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        """``script`` by /bin/sh inside the container, as root."""
        p = subprocess.run(["nsenter", "-t", str(self.leader), "-a", "--", "/bin/sh", "-c", script],
                           capture_output=True, text=True, timeout=timeout)
        if check and p.returncode:
            raise AssertionError(f"in the container: {script!r} exited {p.returncode}\n{p.stdout[-3000:]}\n"
                                 f"{p.stderr[-3000:]}")
        return p

    def poweroff(self, timeout: float = 120) -> int:
        """A clean shutdown, as `systemctl poweroff` on a box; -> nspawn's exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.sh("systemctl poweroff --no-block", check=False)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the container did not power off: {self.log_tail()}") from None

    def kill(self) -> None:
        """SIGKILL to the container's init (which ends every process in it) and to nspawn."""
        if self.proc is not None and self.proc.poll() is None:
            if self.leader:
                try:
                    os.kill(self.leader, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def log_tail(self, n: int = 4000) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""
