"""bench.ha still runs: its rows of rocketbox alone (the SYNC/ASYNC send rows beside the real
4.9.8 pair are bench.e2e's kind, left to the benchmark), short. A module of its own, so that it
runs beside test_bench rather than after it."""
import re
import subprocess
import sys

from tests.integration.harness import ROOT


def test_ha_bench_prints_the_lag_and_the_catch_up_of_an_empty_slave(tmp_path):
    r = subprocess.run([sys.executable, "-m", "bench.ha", "--rows", "lag,catchup", "--seconds", "1", "--rate", "2000",
                        "--catchup-mb", "32", "--disk-mb", "0", "--port", "32000", "--dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=170)   # (ports 31998..32530: free)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "# ha benchmark: seconds=1.0 rate=2000/s" in r.stdout and "catch-up=32 MB" in r.stdout, r.stdout
    lag = re.search(r"^lag at ([\d,]+) msgs/s .*: p50 ([\d.]+) ms  p99 ([\d.]+) ms  \((\d+) samples\)", r.stdout, re.M)
    assert lag and int(lag.group(4)) > 100 and 0 < float(lag.group(2)) <= float(lag.group(3)), r.stdout
    cu = re.search(r"^catch-up of an empty slave: (\d+) MB in [\d.]+ s = (\d+) MB/s \(the disk not measured\)", r.stdout,
                   re.M)
    assert cu and int(cu.group(1)) >= 32 and int(cu.group(2)) > 0, r.stdout
    assert re.search(r"^  CPU s meanwhile: ", r.stdout, re.M), r.stdout
