"""``bench.features`` still runs: transactions, request-reply and an SQL92-filtered consume,
rocketbox beside the real RocketMQ 4.9.8 (a module of its own, so the workers run it beside
``test_bench``'s)."""
import os
import re
import subprocess
import sys

from tests.integration.harness import ROOT


def test_features_bench_prints_every_row_for_both_brokers(tmp_path):
    """Transactions, request-reply and an SQL92-filtered consume, rocketbox beside the real
    RocketMQ 4.9.8 (a short run: the test checks the rows, not the figures)."""
    from tests.integration import javaclient
    java = javaclient.missing() is None
    port = 29000 + (os.getpid() % 10) * 300 + 220
    r = subprocess.run([sys.executable, "-m", "bench.features", "--seconds", "1", "--window", "8", "--messages", "2000",
                        "--port", str(port), "--dir", str(tmp_path), *([] if java else ["--no-rocketmq"])],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "# features benchmark: seconds=1.0 window=8" in r.stdout, r.stdout
    rows = {m.group(1).strip(): [float(v.replace(",", "")) for v in m.group(2).split()]
            for m in re.finditer(r"^(plain send|transactional|request-reply|SQL92 consume)\s+([\d,]+(?:\s+[\d,]+)?)",
                                 r.stdout, re.M)}
    assert set(rows) == {"plain send", "transactional", "request-reply", "SQL92 consume"}, r.stdout
    assert all(len(v) == (2 if java else 1) and all(x > 0 for x in v) for v in rows.values()), rows
    assert "p99" in r.stdout
