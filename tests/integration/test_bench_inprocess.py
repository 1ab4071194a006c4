"""The benchmarks that need no port: ``bench.paths`` (the send and pull paths timed and counted in
one process), ``bench.hiccups`` (how steadily this box runs Python) and ``bench.floor``'s null
reader.  Apart from test_bench.py so the two run on different workers."""
import json
import os
import subprocess
import sys

from tests.integration.harness import ROOT


def test_paths_bench_times_and_counts_the_send_and_pull_paths(tmp_path):
    for extra, per_round in (([], 16), (["--batch", "32", "--json"], 128), (["--per-read", "1"], 1)):
        r = subprocess.run([sys.executable, "-m", "bench.paths", "--rounds", "30", "--dir", str(tmp_path), *extra],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        res = json.loads(r.stdout.splitlines()[-1][2:])
        assert res["reader_us"] > 0 and res["writer_us"] > 0 and res["dispatcher_us"] > 0, res
        assert res["writer_dispatcher_us"] == res["writer_us"] + res["dispatcher_us"], res
        assert res["msgs_per_round"] == per_round and res["json"] == ("--json" in extra)
    r = subprocess.run([sys.executable, "-m", "bench.paths", "--pull", "--rounds", "30", "--dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.splitlines()[-1][2:])      # it read the last round's 8 x 32 messages back itself
    assert res["pull"] and res["msgs_per_round"] == 256 and 0 < res["reader_us"] < 1000, res
    assert "writer_us" not in res, res
    r = subprocess.run([sys.executable, "-m", "bench.paths", "--instructions", "--dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.splitlines()[-1][2:])
    # a single send costs each of the three threads well over 1k instructions and well under 10M
    assert all(1e3 < res[f"{t}_instructions"] < 1e7 for t in ("reader", "writer", "dispatcher")), res
    assert os.listdir(tmp_path) == []                 # its stores and callgrind files are gone


def test_hiccups_measures_chunks_and_reports_windows(tmp_path):
    r = subprocess.run([sys.executable, "-m", "bench.hiccups", "--seconds", "1", "--page-mib", "16", "--dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.splitlines()[-1][2:])
    # 16 MiB written twice: 4,096 pages each time, each a copy of 4 KiB at least (~0.05 µs)
    assert res["page_mib"] == 16 and 0.05 < res["cached_page_us"] < 1000 and 0.05 < res["fresh_page_us"] < 1000, res
    assert os.listdir(tmp_path) == []                 # its file is gone
    assert res["chunks"] > 100 and 1 < res["median_chunk_us"] < 100_000, res   # ~2 ms apart over 1 s
    assert 0 <= res["slow_chunks"] < res["chunks"] and res["worst_slowdown"] >= 1, res
    assert (res["windows"] == 0) == (res["slow_chunks"] == 0), res
    # what takes memory back behind the processes, as the kernel says it
    assert all(a in ("willneed", "cold", "pageout", "hugepage", "nohugepage", "lru_prio", "lru_deprio", "stat",
                     "migrate_hot", "migrate_cold") for a in res["damon_schemes"]), res
    assert f"DAMON schemes: {', '.join(res['damon_schemes']) or 'none running'}" in r.stdout, r.stdout
    reporting = os.path.exists("/sys/module/page_reporting/parameters/page_reporting_order")
    assert (res["free_page_reporting"] is not None) == reporting, res


def test_null_reader_answers_every_frame_with_its_opaque_after_a_proxy_header():
    from bench.floor import NullReader
    from rocketbox.net import proxy as _proxy
    from rocketbox.remoting import codec
    from rocketbox.remoting.codec import Command

    class Transport:
        def __init__(self):
            self.written = []

        def writelines(self, pieces):
            self.written += pieces

    frames = b"".join(codec.encode(Command(310, {"b": "T"}, b"x" * n, opaque=1000 + n, serialize_type=codec.ROCKETMQ))
                      for n in range(5))
    header = _proxy.SIGNATURE + bytes([0x21, 0x11, 0, 12]) + bytes([10, 0, 0, 1, 127, 0, 0, 1, 0x30, 0x39, 0x27, 0x10])
    reader, t = NullReader(), Transport()
    reader.connection_made(t)
    data = header + frames
    for i in range(0, len(data), 7):                  # split anywhere: the header and frames across reads
        reader.data_received(data[i:i + 7])
    got = codec.Decoder().feed(b"".join(t.written))
    assert [c.opaque for c in got] == [1000 + n for n in range(5)]
    assert all(c.is_response and c.code == 0 and c.ext["queueId"] == "3" for c in got)
    assert len(t.written[0]) == len(NullReader.REPLY) and not reader.buf
