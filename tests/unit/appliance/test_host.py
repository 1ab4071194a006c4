"""appliance/host.py: the tuned settings read off this host, the store's disk found from its
directory, and the files install.sh writes (each setting with its reason)."""
import os
import subprocess
import sys

from rocketbox.appliance import host


def test_every_setting_is_read_off_this_host_and_the_store_disk_is_found(tmp_path):
    rows = {s.name: s for s in host.settings(str(tmp_path / "not" / "yet" / "made"))}
    for name, _v, _why in host.SYSCTLS:
        actual = open(os.path.join("/proc/sys", *name.split("."))).read().strip()
        assert rows[name].actual == actual and rows[name].holds == (actual.split() == rows[name].wanted.split())
    dev = host.store_device(str(tmp_path))
    if dev is not None:                                  # a block device holds the temp dir (not a tmpfs)
        sched = open(f"/sys/block/{dev}/queue/scheduler").read()
        assert f"[{rows[f'/sys/block/{dev}/queue/scheduler'].actual}]" in sched
    assert 65_536 <= int(rows["vm.min_free_kbytes"].wanted) <= 1_048_576


def test_the_files_install_writes_give_each_setting_its_reason():
    text = host.sysctl_file()
    lines = text.splitlines()
    for name, _v, why in host.SYSCTLS:
        at = next(i for i, line in enumerate(lines) if line.startswith(f"{name} = "))
        assert lines[at - 1] == f"# {why}"
    assert "vm.swappiness = 1" in text and "vm.max_map_count = 655360" in text
    rule = host.udev_rule(["vda", "nvme0n1"])
    assert 'KERNEL=="vda|nvme0n1"' in rule and 'ATTR{queue/scheduler}="mq-deadline"' in rule


def test_check_prints_wanted_actual_and_whether_each_holds():
    out = subprocess.run([sys.executable, "-m", "rocketbox.appliance", "host"], capture_output=True, text=True, timeout=60)
    rows = [line.split() for line in out.stdout.splitlines()[1:-1]]
    assert {r[0] for r in rows} >= {name for name, _v, _w in host.SYSCTLS}
    held = sum(r[-1] == "yes" for r in rows)
    assert f"{held} of {len(rows)} settings hold" in out.stdout
    assert out.returncode == (0 if held == len(rows) else 1)


def test_apply_sets_each_setting_on_this_host_and_says_what_it_refused(tmp_path):
    """On the real kernel (a container cannot: tests/integration/test_systemd.py sees it refuse),
    then every value put back as it was."""
    before = {s.path: s.actual for s in host.settings(str(tmp_path)) if s.path and s.actual is not None}
    try:
        changed, refused = host.apply(str(tmp_path))
        after = {s.name: s for s in host.settings(str(tmp_path))}
        for line in changed:
            name = line.split(":")[0]
            assert after[name].holds, line                  # what it says it set, holds
        for line in refused:
            name = line.split(":")[0]
            assert not after[name].holds and ("refused" in line or "cannot be set here" in line), line
        assert not [s for s in after.values() if not s.holds and not any(r.startswith(s.name + ":") for r in refused)]
        assert changed or refused or all(s.holds for s in after.values())
    finally:
        for path, value in before.items():
            try:
                with open(path, "w") as f:
                    f.write(value.split("[")[1].split("]")[0] if "[" in value else value)
            except OSError:
                pass
    assert {s.path: s.actual for s in host.settings(str(tmp_path)) if s.path and s.actual is not None} == before
