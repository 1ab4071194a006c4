"""appliance/install.py's parts that need no booted systemd: broker.conf written once and the
defaults' diff, the release's identity, the store disk's checks (on real tmpfs mounts), the release
switch, and install.sh's answer to a user without root. The whole install runs in a booted
container in tests/integration/test_systemd.py."""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import fields

import pytest

from rocketbox.appliance import config, install

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_the_first_broker_conf_is_the_defaults_with_the_store_in_var_lib(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(install.defaults_text())
    cfg, dflt = config.load(str(conf)), config.load()
    assert cfg.root == "/var/lib/rocketbox"
    differ = [f.name for f in fields(cfg) if getattr(cfg, f.name) != getattr(dflt, f.name)]
    assert sorted(differ) == ["source", "storePathRootDir"]
    text = conf.read_text()
    assert "#flushDiskType=ASYNC_FLUSH\n" in text and "#brokerName=\n" in text      # the host's name: computed
    assert sum(1 for line in text.splitlines() if line.startswith("#") and "=" in line) >= len(config.TABLE) - 1


def test_broker_conf_is_written_once_and_a_changed_default_is_shown_as_a_diff(tmp_path):
    conf, defaults = str(tmp_path / "etc" / "broker.conf"), str(tmp_path / "etc" / "broker.conf.defaults")
    first = install.write_conf(conf, defaults)
    assert first == [f"wrote {conf} (RocketMQ's defaults, the store in /var/lib/rocketbox)"]
    assert install.write_conf(conf, defaults) == []                    # again: nothing
    with open(conf, "a") as f:
        f.write("flushDiskType=SYNC_FLUSH\n")                           # the operator's own setting
    mine = open(conf).read()
    older = open(defaults).read().replace("#fileReservedTime=72", "#fileReservedTime=48")   # an older release's
    with open(defaults, "w") as f:
        f.write(older)
    out = install.write_conf(conf, defaults)
    assert len(out) == 1 and "this release changes broker.conf's defaults" in out[0], out
    assert "\n-#fileReservedTime=48\n+#fileReservedTime=72" in out[0]
    assert open(conf).read() == mine                                   # kept as the operator left it
    assert install.write_conf(conf, defaults) == []
    assert oct(os.stat(conf).st_mode & 0o777) == "0o640"


def test_a_release_is_the_checkouts_content(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*install._SKIP, "*.egg-info"))
    rid = install.release_id(str(src))
    assert len(rid) == 12 and rid == install.release_id(str(src))
    assert install.release_id(str(src), "[spark]") != rid                # with pyspark: another release
    for junk in (".git/HEAD", ".venv/x", "data/store/commitlog", "appliance/__pycache__/x.pyc", "rocketbox.egg-info/x"):
        (src / junk).parent.mkdir(parents=True, exist_ok=True)
        (src / junk).write_text("not the product")
    assert install.release_id(str(src)) == rid
    assert "install.sh" in install.source_files(str(src)) and "appliance/install.py" in install.source_files(str(src))
    with open(src / "appliance" / "__init__.py", "a") as f:
        f.write("# a newer release\n")
    assert install.release_id(str(src)) != rid


def test_the_link_moves_to_the_new_release_and_two_are_kept(tmp_path):
    opt = str(tmp_path)
    for rid in ("aaa", "bbb", "ccc"):                                  # each built, then switched to
        os.makedirs(os.path.join(opt, "releases", rid))
        install.switch_release(rid, opt)
        assert install.current_release(opt) == rid
        assert os.readlink(os.path.join(opt, "venv")) == f"releases/{rid}"
    assert sorted(os.listdir(os.path.join(opt, "releases"))) == ["bbb", "ccc"]


@pytest.fixture
def mount(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    points = []

    def make(size: str, ro: bool = False) -> str:
        d = tmp_path / f"m{len(points)}"
        d.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}" + (",ro" if ro else ""), "tmpfs", str(d)], check=True)
        points.append(str(d))
        return str(d)
    yield make
    for p in points:
        subprocess.run(["umount", "-l", p])


def test_a_read_only_or_full_store_disk_is_reported(mount):
    cfg = config.load(None, {"storePathRootDir": os.path.join(mount("1M", ro=True), "store")})
    assert install.store_problems(cfg) == [f"the store directory {cfg.root} is on a read-only filesystem "
                                           f"({os.path.dirname(cfg.root)})"]
    full = mount("1M")
    cfg = config.load(None, {"storePathRootDir": os.path.join(full, "store")})
    assert install.store_problems(cfg) == []
    with open(os.path.join(full, "filler"), "wb") as f:
        f.write(b"x" * ((1 << 20) * 95 // 100))
    (problem,) = install.store_problems(cfg)
    assert problem.startswith(f"the store directory {cfg.root} is on a full disk: ") and \
        "diskSpaceWarningLevelRatio=90%" in problem, problem
    elsewhere = os.path.join(mount("1M", ro=True), "commitlog")      # storePathCommitLog on a disk of its own
    cfg = config.load(None, {"storePathRootDir": os.path.join(mount("1M"), "store"), "storePathCommitLog": elsewhere})
    assert cfg.data_dirs == [cfg.root, elsewhere]
    assert install.store_problems(cfg) == [f"the store directory {elsewhere} is on a read-only filesystem "
                                           f"({os.path.dirname(elsewhere)})"]


def test_install_sh_explains_what_it_needs_root_for():
    if os.geteuid() != 0:
        p = subprocess.run(["bash", os.path.join(ROOT, "install.sh")], capture_output=True, text=True, timeout=30)
    else:
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash",
                            os.path.join(ROOT, "install.sh")], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p
    assert "the system-wide install needs root" in p.stderr and "sudo ./install.sh" in p.stderr, p.stderr
    p = subprocess.run(["bash", os.path.join(ROOT, "install.sh"), "--bogus"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "unknown argument '--bogus'" in p.stderr
