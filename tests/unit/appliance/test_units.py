"""appliance/units.py: the units in systemd/ are its rendering with the defaults, systemd's own
checker finds nothing wrong in them, and each one's exposure (systemd-analyze security) is "OK"
(at most 4.0)."""
import os
import re
import shutil
import subprocess

import pytest

from rocketbox.appliance import config, units

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_the_committed_units_are_the_rendering_with_the_defaults():
    files = units.render(config.load(None))
    on_disk = {n for n in os.listdir(os.path.join(ROOT, "systemd")) if n.startswith("rocketbox")}
    assert on_disk == set(files)
    for name, text in files.items():
        assert open(os.path.join(ROOT, "systemd", name)).read() == text, f"{name}: run appliance units --out systemd"
    target = files["rocketbox.target"]
    assert "rocketbox-reader@0.service rocketbox-reader@1.service" in target      # readerProcessNums 2
    assert "RemoveIPC" not in files["rocketbox-writer.service"]                    # it would unlink the rings


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze on this box")
def test_systemd_verifies_them_and_rates_their_exposure_ok(tmp_path):
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    os.symlink(os.path.join(ROOT, ".venv"), prefix / "venv")          # ExecStart must exist to verify
    out = tmp_path / "units"
    out.mkdir()
    for name, text in units.render(config.load(None), str(prefix)).items():
        (out / name).write_text(text)
    paths = sorted(str(p) for p in out.iterdir())
    v = subprocess.run(["systemd-analyze", "verify", "--man=no", *paths], capture_output=True, text=True,
                       cwd=str(out), timeout=60)
    assert v.returncode == 0 and not v.stderr.strip(), v.stderr
    for p in paths:
        if not p.endswith(".service"):
            continue
        sec = subprocess.run(["systemd-analyze", "security", "--offline=true", p], capture_output=True, text=True,
                             timeout=60)
        level = float(re.search(r"Overall exposure level for \S+: ([\d.]+)", sec.stdout).group(1))
        assert level <= 4.0, (p, level)


def test_a_broker_conf_renders_its_readers_and_every_store_directory(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("storePathRootDir=/srv/rbx\nstorePathCommitLog=/mnt/fast/commitlog\nreaderProcessNums=3\n")
    out = tmp_path / "units"
    out.mkdir()
    assert units.main(["-c", str(conf), "--conf", "/etc/rocketbox/broker.conf", "--out", str(out)]) == 0
    writer = (out / "rocketbox-writer.service").read_text()
    assert "\nReadWritePaths=/srv/rbx /mnt/fast/commitlog\n" in writer
    assert "ExecStart=/opt/rocketbox/venv/bin/appliance run writer -c /etc/rocketbox/broker.conf\n" in writer
    assert "rocketbox-reader@2.service rocketbox-haproxy.service" in (out / "rocketbox.target").read_text()
    conf.write_text("readerProcessNum=3\n")
    assert units.main(["-c", str(conf), "--out", str(out)]) == 2                  # a bad key: said, no traceback
