"""The generated HAProxy config: what HAProxy itself accepts, and how it watches the readers."""
import re
import subprocess

from rocketbox.appliance import config
from rocketbox.haproxy.service import DOWN_CHECK_MS, binary, render


def test_config_checks_each_reader_and_rechecks_a_down_one_soon(tmp_path):
    cfg = config.load(overrides={"storePathRootDir": str(tmp_path), "listenPort": "20911", "readerProcessNums": "3"})
    text = render(cfg)
    path = tmp_path / "haproxy.cfg"
    path.write_text(text)
    check = subprocess.run([binary(cfg), "-c", "-q", "-f", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr                    # HAProxy's own parser accepts it
    servers = re.findall(r"^\s+server reader-(\d) 127\.0\.0\.1:(\d+) (.*)$", text, re.M)
    assert [(int(i), int(port)) for i, port, _ in servers] == [(i, cfg.reader_port(i)) for i in range(3)]
    for _i, _port, opts in servers:
        # out of rotation after one failed check, back after one good one; a down reader is
        # checked every DOWN_CHECK_MS, so a restarted reader serves again soon after it listens
        assert opts.split() == ["check", "inter", "1s", "downinter", f"{DOWN_CHECK_MS}ms", "fall", "1", "rise", "1",
                                "send-proxy-v2", "check-send-proxy"], opts
    assert DOWN_CHECK_MS <= 250
    assert re.search(r"^\s+bind 0\.0\.0\.0:20911$", text, re.M) and re.search(r"^\s+bind 0\.0\.0\.0:20909$", text, re.M)
