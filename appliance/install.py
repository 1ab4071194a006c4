"""The system-wide install: ``sudo ./install.sh`` (and ``--uninstall``, ``--purge``).

``install.sh`` installs the Debian packages (python3-venv, HAProxy), then runs this module with
the box's own ``python3``; so it imports the standard library only, and what needs the broker's
own packages (the units, the host's tuning) runs through the release's ``appliance``.

What lands where:
- ``/opt/rocketbox/releases/<hash>``: a venv with this checkout installed in it (its pinned
  dependencies from pyproject.toml) and the sources it was built from in ``src/``. ``<hash>`` is
  the checkout's content (and ``--spark`` or not), so a second run with the same checkout builds nothing.
  ``/opt/rocketbox/venv`` is a symbolic link to the current release; the units run
  ``/opt/rocketbox/venv/bin/appliance``. The release before it is kept, older ones removed.
- ``/etc/rocketbox/broker.conf``: written once (every key with its default, commented out, and
  ``storePathRootDir=/var/lib/rocketbox``), never overwritten. ``broker.conf.defaults`` beside it
  is this release's list of defaults; when an upgrade changes one, the install prints the diff.
- ``/etc/systemd/system/rocketbox*``: the units ``appliance units`` renders from broker.conf.
- ``/etc/sysctl.d/60-rocketbox.conf`` and ``/etc/udev/rules.d/60-rocketbox.rules``: the host's
  tuning (``appliance/host.py``), applied now too; what the host refuses is said, not fatal.
- ``/var/lib/rocketbox``: the store, owned by the system user ``rocketbox``.

The order keeps a running appliance safe: everything that can fail (the release's build,
broker.conf's validation with its file, line and key, the store disk's checks, the units'
rendering) happens before anything running is touched. Only then, if the code or the units
changed and the appliance runs, ``systemctl stop rocketbox.target`` (a clean stop in the units'
order: final flush, checkpoint, abort marker removed), the link moves to the new release, and
``systemctl start rocketbox.target``. A first install enables and starts the target.
"""
from __future__ import annotations

import argparse
import difflib
import hashlib
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time

from rocketbox.appliance import config, host

OPT = "/opt/rocketbox"
ETC = "/etc/rocketbox"
CONF = f"{ETC}/broker.conf"
DEFAULTS = f"{ETC}/broker.conf.defaults"
STORE = "/var/lib/rocketbox"
USER = "rocketbox"
UNIT_DIR = "/etc/systemd/system"
SYSCTL_FILE = "/etc/sysctl.d/60-rocketbox.conf"
UDEV_FILE = "/etc/udev/rules.d/60-rocketbox.rules"
TARGET = "rocketbox.target"
# what of a checkout is not the product: VCS, venvs, caches, build output, a dev store
_SKIP = {".git", ".venv", "data", "build", "dist", "__pycache__", "node_modules", ".mypy_cache", ".pytest_cache",
         ".ruff_cache"}


class InstallError(Exception):
    """What stops the install, before anything running is touched."""


# ------------------------------------------------------------------------------------ the code
def source_files(checkout: str) -> list[str]:
    """The checkout's files that make a release (relative paths, sorted); a symbolic link (the
    folders of ``rocketbox/``) is one entry, copied as a link."""
    out = []
    for top, dirs, files in os.walk(checkout):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP and not d.endswith(".egg-info"))
        out += [os.path.relpath(os.path.join(top, d), checkout) for d in dirs if os.path.islink(os.path.join(top, d))]
        out += [os.path.relpath(os.path.join(top, f), checkout) for f in files if not f.endswith((".pyc", ".pyo"))]
    return sorted(out)


def _content(path: str) -> bytes:
    """What a release entry holds: a link's target, a file's bytes."""
    if os.path.islink(path):
        return os.readlink(path).encode()
    with open(path, "rb") as f:
        return f.read()


def release_id(checkout: str, extras: str = "") -> str:
    """The checkout's content and the extras installed with it (``[spark]``), as 12 hex digits:
    the same files give the same release."""
    h = hashlib.sha256(extras.encode() + b"\0")
    for rel in source_files(checkout):
        h.update(rel.encode() + b"\0" + hashlib.sha256(_content(os.path.join(checkout, rel))).digest())
    return h.hexdigest()[:12]


def build_release(checkout: str, rid: str, extras: str, opt: str = OPT) -> tuple[str, bool]:
    """``<opt>/releases/<rid>`` with its venv -> (its path, whether it was built now). A release
    that is there and complete is left alone; a half-built one (a failed run) is built again."""
    path = os.path.join(opt, "releases", rid)
    if os.path.exists(os.path.join(path, ".complete")):
        return path, False
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    src = os.path.join(path, "src")
    for rel in source_files(checkout):
        os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
        if os.path.islink(os.path.join(checkout, rel)):
            os.symlink(os.readlink(os.path.join(checkout, rel)), os.path.join(src, rel))
        else:
            shutil.copy2(os.path.join(checkout, rel), os.path.join(src, rel))
    _run([sys.executable, "-m", "venv", path], "making the release's venv")
    _run([os.path.join(path, "bin", "pip"), "install", "-q", "--disable-pip-version-check", "-e", f"{src}{extras}"],
         "installing rocketbox (the tree, editable) and its pinned dependencies into the venv")
    write_launcher(path)
    install_protocol(path)
    shutil.rmtree(os.path.join(src, "build"), ignore_errors=True)
    with open(os.path.join(path, ".complete"), "w") as f:
        f.write(rid + "\n")
    return path, True


def install_protocol(venv: str, client: bool = False) -> None:
    """RocketMQ 5.x's gRPC protocol for the gRPC front: the official Python client's wheel (its
    descriptors; ``grpcfront/v2.py``), in ``<venv>/rocketmq5``, apart from the venv's packages
    (its top-level ``rocketmq`` is the 4.x C++ client's name too).  ``client``: with what the client
    needs to run (the tests and ``bench.e2e``'s gRPC rows run it); the front reads two of its files only.
    Idempotent."""
    from rocketbox.grpcfront import PROTOCOL  # (no protobuf here: the installer's Python may lack it)
    target = os.path.join(venv, "rocketmq5")
    name, version = PROTOCOL.split("==")
    marker = os.path.join(target, ".with-client" if client else ".protocol")
    if os.path.isdir(os.path.join(target, f"{name.replace('-', '_')}-{version}.dist-info")) and (
            os.path.exists(marker) or os.path.exists(os.path.join(target, ".with-client"))):
        return
    shutil.rmtree(target, ignore_errors=True)
    _run([os.path.join(venv, "bin", "pip"), "install", "-q", "--disable-pip-version-check", "--target", target,
          *([] if client else ["--no-deps"]), PROTOCOL], f"installing RocketMQ 5.x's protocol ({PROTOCOL}) into {target}")
    with open(marker, "w"):
        pass


def write_launcher(venv: str) -> None:
    """``<venv>/bin/appliance``: the command the units, install.sh and people run. It is not a
    console script of the distribution, which is the client library alone (setup.py)."""
    path = os.path.join(venv, "bin", "appliance")
    with open(path + ".tmp", "w") as f:
        f.write('#!/bin/sh\nexec "$(dirname "$0")/python" -m rocketbox.appliance "$@"\n')
    os.chmod(path + ".tmp", 0o755)
    os.replace(path + ".tmp", path)


def current_release(opt: str = OPT) -> str | None:
    link = os.path.join(opt, "venv")
    return os.path.basename(os.readlink(link)) if os.path.islink(link) else None


def switch_release(rid: str, opt: str = OPT) -> None:
    """Point ``<opt>/venv`` at the release (a rename: no moment without one) and remove the
    releases older than the one before it."""
    previous = current_release(opt)
    tmp = os.path.join(opt, ".venv.new")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(os.path.join("releases", rid), tmp)
    os.replace(tmp, os.path.join(opt, "venv"))
    keep = {rid, previous}
    for old in os.listdir(os.path.join(opt, "releases")):
        if old not in keep:
            shutil.rmtree(os.path.join(opt, "releases", old), ignore_errors=True)


# ------------------------------------------------------------------------------------ the conf
def defaults_text(store: str = STORE) -> str:
    """broker.conf as first written: every key with its default and meaning, commented out, and
    the store under ``store`` (also this release's list of defaults, to compare with the last)."""
    out = ["# rocketbox broker.conf (Java properties: key=value). Written once by install.sh and never",
           "# overwritten; every key is shown with its default, commented out. Change one by removing its '#',",
           "# then: sudo systemctl restart rocketbox.target",
           "",
           f"storePathRootDir={store}",
           ""]
    for key, _parser, default, doc in config.TABLE:
        if key == "storePathRootDir":
            continue
        if doc:
            out.append(f"# {doc}")
        out.append(f"#{key}=" + ("" if callable(default) else default))
    return "\n".join(out) + "\n"


def write_if_changed(path: str, text: str, mode: int = 0o644) -> bool:
    """Write ``text`` to ``path`` (atomically) unless it holds it already -> whether it wrote."""
    try:
        with open(path) as f:
            if f.read() == text:
                return False
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.rocketbox-new"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return True


def write_conf(conf: str = CONF, defaults: str = DEFAULTS, store: str = STORE) -> list[str]:
    """broker.conf once; the defaults file always -> lines saying what changed (with the diff of
    defaults this release changed)."""
    changes, text = [], defaults_text(store)
    if not os.path.exists(conf):
        write_if_changed(conf, text, 0o640)
        changes.append(f"wrote {conf} (RocketMQ's defaults, the store in {store})")
    try:
        with open(defaults) as f:
            before = f.read()
    except FileNotFoundError:
        before = None
    if write_if_changed(defaults, text):
        if before is not None:
            diff = "".join(difflib.unified_diff(before.splitlines(True), text.splitlines(True),
                                                f"{defaults} (before)", f"{defaults} (this release)"))
            changes.append(f"this release changes broker.conf's defaults ({conf} is kept as it is; "
                           f"a key set there keeps its value):\n{diff.rstrip()}")
    return changes


# ------------------------------------------------------------------------------------ checks
def store_problems(cfg) -> list[str]:
    """What makes a store directory unusable: a read-only filesystem, or a disk fuller than the
    appliance accepts sends at (``diskSpaceWarningLevelRatio``)."""
    out = []
    for d in cfg.data_dirs:
        path = d
        while not os.path.exists(path):
            path = os.path.dirname(path)
        st = os.statvfs(path)
        if st.f_flag & os.ST_RDONLY:
            out.append(f"the store directory {d} is on a read-only filesystem ({path})")
            continue
        total = st.f_blocks * st.f_frsize
        used_pct = 100 * (total - st.f_bavail * st.f_frsize) / total if total else 100
        if used_pct >= cfg.diskSpaceWarningLevelRatio:
            out.append(f"the store directory {d} is on a full disk: {used_pct:.0f}% used, "
                       f"{st.f_bavail * st.f_frsize / 2**20:.0f} MiB free; the appliance refuses sends above "
                       f"diskSpaceWarningLevelRatio={cfg.diskSpaceWarningLevelRatio}%")
    return out


def load_conf(conf: str = CONF):
    try:
        return config.load(conf)
    except config.ConfigError as e:
        raise InstallError(f"{e}\n  nothing was changed: fix {conf} and run install.sh again") from None


# ------------------------------------------------------------------------------------ the host
def systemd_running() -> bool:
    return os.path.isdir("/run/systemd/system")


def _run(cmd: list[str], what: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode:
        raise InstallError(f"{what} failed: {' '.join(cmd)} exited {p.returncode}\n{(p.stderr or p.stdout).strip()}")
    return p


def ensure_user() -> list[str]:
    try:
        pwd.getpwnam(USER)
        return []
    except KeyError:
        _run(["useradd", "--system", "--user-group", "--home-dir", STORE, "--no-create-home",
              "--shell", "/usr/sbin/nologin", "--comment", "rocketbox broker", USER], "creating the user")
        return [f"created the system user {USER}"]


def ensure_store(cfg) -> list[str]:
    """The store's directories, owned by the user the units run as."""
    u, out = pwd.getpwnam(USER), []
    for d in cfg.data_dirs:
        made = not os.path.isdir(d)
        os.makedirs(d, mode=0o750, exist_ok=True)
        st = os.stat(d)
        if (st.st_uid, st.st_gid) != (u.pw_uid, u.pw_gid):
            for top, dirs, files in os.walk(d):
                for name in [top] + [os.path.join(top, n) for n in dirs + files]:
                    os.lchown(name, u.pw_uid, u.pw_gid)
            out.append(f"made {d} for {USER}" if made else f"gave {d} to {USER}")
    return out


def render_units(release: str, conf: str) -> dict[str, str]:
    """The units the release renders from ``conf`` (its readers, its store path)."""
    with tempfile.TemporaryDirectory() as out:
        _run([os.path.join(release, "bin", "appliance"), "units", "-c", conf, "--conf", conf, "--prefix", OPT,
              "--out", out], "rendering the units")
        files = {}
        for name in sorted(os.listdir(out)):
            with open(os.path.join(out, name)) as f:
                files[name] = f.read()
        return files


def _our_units() -> set[str]:
    try:
        return {n for n in os.listdir(UNIT_DIR) if n.startswith("rocketbox") and n.endswith((".service", ".target"))}
    except FileNotFoundError:
        return set()


def write_units(units: dict[str, str]) -> list[str]:
    changes = [f"wrote {UNIT_DIR}/{name}" for name, text in units.items()
               if write_if_changed(os.path.join(UNIT_DIR, name), text)]
    for stale in sorted(_our_units() - set(units)):
        os.unlink(os.path.join(UNIT_DIR, stale))
        changes.append(f"removed {UNIT_DIR}/{stale} (no longer rendered)")
    return changes


def write_tuning(cfg) -> tuple[list[str], list[str]]:
    """The sysctl file and the udev rule, and their settings applied now -> (what changed, what
    the host refused: said at every run, and no reason to stop)."""
    changes = []
    if write_if_changed(SYSCTL_FILE, host.sysctl_file()):
        changes.append(f"wrote {SYSCTL_FILE}")
    if write_if_changed(UDEV_FILE, host.udev_rule([host.store_device(d) for d in cfg.data_dirs])):
        changes.append(f"wrote {UDEV_FILE}")
    changed, refused = host.apply(*cfg.data_dirs)
    return changes + [f"host: {line}" for line in changed], [f"host: {line}" for line in refused]


def systemctl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["systemctl", *args], f"systemctl {' '.join(args)}", check)


def stop_all(cfg) -> str:
    """Stop the target and wait for every unit of it (the target alone is reached, and so
    stopped, before its units: ``systemctl stop rocketbox.target`` returns while they still stop;
    naming them all makes the one call wait for each). -> what it did."""
    systemctl("stop", TARGET, "rocketbox-*")                 # the units' order: a clean stop
    if os.path.exists(os.path.join(cfg.root, "abort")):
        return ("stopped rocketbox.target, not cleanly (the abort marker is there: recovery runs at the start; "
                "journalctl -u rocketbox-store says why)")
    return "stopped rocketbox.target (clean: flushed, checkpointed)"


def target_active() -> bool:
    return systemd_running() and systemctl("is-active", "--quiet", TARGET, check=False).returncode == 0


# ------------------------------------------------------------------------------------ the runs
def install(checkout: str, extras: str = "", start: bool = True) -> tuple[list[str], list[str]]:
    """-> (what changed, what the host refused), a line each. Raises InstallError before touching
    anything running."""
    changes = ensure_user()
    os.makedirs(os.path.join(OPT, "releases"), exist_ok=True)
    os.makedirs(ETC, mode=0o755, exist_ok=True)
    changes += write_conf()
    cfg = load_conf()                                       # file, line and key, before anything else
    problems = store_problems(cfg)
    if problems:
        raise InstallError("; ".join(problems) + "\n  nothing running was touched")
    rid = release_id(checkout, extras)
    first = current_release() is None
    release, built = build_release(checkout, rid, extras)
    if built:
        changes.append(f"built release {rid} in {release}")
    units = render_units(release, CONF)
    changes += ensure_store(cfg)
    was_running = target_active()
    code_moves = current_release() != rid
    unit_changes = write_units(units)
    changes += unit_changes
    tuned, refused = write_tuning(cfg)
    changes += tuned
    if was_running and (code_moves or unit_changes):
        changes.append(stop_all(cfg))
    if code_moves:
        switch_release(rid)
        changes.append(f"/opt/rocketbox/venv -> release {rid}")
    if not systemd_running():
        refused.append(f"systemd is not running here (PID 1 is {_pid1()}): the units are written, not started")
        return changes, refused
    if unit_changes:
        systemctl("daemon-reload")
    if systemctl("is-enabled", "--quiet", TARGET, check=False).returncode:
        systemctl("enable", "--quiet", TARGET)
        changes.append("enabled rocketbox.target (it starts at boot)")
    if (was_running and (code_moves or unit_changes)) or (first and start):
        systemctl("start", TARGET)
        started_or_fail(units)
        changes.append("started rocketbox.target")
    return changes, refused


def started_or_fail(units: dict[str, str], settle_s: float = 3.0) -> None:
    """A target is reached even when a unit it wants failed: look at each one. The keeper is
    Type=notify (ready when the start returns); a role that dies at once does so within
    ``settle_s``, and is then failed or restarting."""
    found = re.search(r"^Wants=(.*)$", units[TARGET], re.M)
    if found is None:
        raise InstallError(f"{TARGET} as rendered wants no unit")
    wants = found.group(1).split()
    time.sleep(settle_s)
    states = systemctl("is-active", *wants, check=False).stdout.split()
    bad = []
    for unit, state in zip(wants, states):
        restarts = systemctl("show", "-p", "NRestarts", "--value", unit, check=False).stdout.strip()
        if state != "active" or restarts not in ("", "0"):
            bad.append(f"{unit} is {state}" + (f" after {restarts} restarts" if restarts not in ("", "0") else ""))
    if bad:
        raise InstallError(f"started rocketbox.target, but {'; '.join(bad)}: see journalctl -u 'rocketbox*' -b")


def uninstall(purge: bool) -> list[str]:
    changes = []
    store = STORE
    try:
        store = os.path.abspath(config.load(CONF).root) if os.path.exists(CONF) else STORE
    except config.ConfigError:
        pass
    if systemd_running() and os.path.exists(os.path.join(UNIT_DIR, TARGET)):
        systemctl("disable", "--quiet", TARGET, check=False)
        systemctl("stop", TARGET, "rocketbox-*", check=False)
        changes.append("stopped and disabled rocketbox.target")
    for name in sorted(_our_units()):
        os.unlink(os.path.join(UNIT_DIR, name))
        changes.append(f"removed {UNIT_DIR}/{name}")
    if changes and systemd_running():
        systemctl("daemon-reload", check=False)
    for path in (SYSCTL_FILE, UDEV_FILE):
        if os.path.exists(path):
            os.unlink(path)
            changes.append(f"removed {path} (the running kernel keeps its values until a reboot)")
    for path in (OPT, ETC):
        if os.path.exists(path):
            shutil.rmtree(path)
            changes.append(f"removed {path}")
    if purge:
        if os.path.exists(store):
            shutil.rmtree(store)
            changes.append(f"removed the store {store}")
        try:
            pwd.getpwnam(USER)
            _run(["userdel", USER], "removing the user")
            changes.append(f"removed the user {USER}")
        except KeyError:
            pass
    elif os.path.exists(store):
        changes.append(f"kept the store {store} and the user {USER} (--purge removes them)")
    return changes


def _pid1() -> str:
    try:
        with open("/proc/1/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="install.sh", description="install rocketbox system-wide (root)")
    ap.add_argument("--checkout", default=os.getcwd(), help="the sources to install (default: here)")
    ap.add_argument("--spark", action="store_true", help="also the Spark side (pyspark, ~400 MB): appliance spark")
    ap.add_argument("--no-start", action="store_true", help="a first install enables the target but does not start it")
    ap.add_argument("--uninstall", action="store_true", help="remove the units, the code and the settings; keep the store")
    ap.add_argument("--purge", action="store_true", help="with --uninstall: remove the store and the user too")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("install.sh: the system-wide install needs root: it creates the user rocketbox and writes /opt/rocketbox, "
              "/etc/rocketbox, /var/lib/rocketbox, /etc/systemd/system, /etc/sysctl.d and /etc/udev/rules.d. "
              "Run: sudo ./install.sh   (or ./install.sh --dev for a venv in this checkout, no root needed)",
              file=sys.stderr)
        return 2
    try:
        notes: list[str] = []
        if args.uninstall or args.purge:
            changes = uninstall(args.purge)
        else:
            extras = "[appliance,spark]" if args.spark else "[appliance]"
            changes, notes = install(os.path.abspath(args.checkout), extras, not args.no_start)
    except InstallError as e:
        print(f"install.sh: {e}", file=sys.stderr)
        return 1
    for line in notes:
        print(f"install.sh: note: {line}")
    for line in changes:
        print(f"install.sh: {line}")
    if not changes:
        print("install.sh: nothing changed" + ("" if args.uninstall or args.purge else
              f" (release {current_release()}, {CONF} kept, units and tuning as written"
              + (", rocketbox.target running)" if target_active() else ")")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
