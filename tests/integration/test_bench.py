"""The end-to-end benchmark still runs: a short ASYNC_FLUSH pass against a real appliance and a
real redis-server prints every row with figures for both and no errors."""
import json
import os
import re
import subprocess
import sys

import pytest

from tests.integration.harness import ROOT


def test_e2e_bench_prints_every_row_for_the_three_servers(tmp_path):
    """rocketbox, the real Apache RocketMQ 4.9.8 and Redis, side by side, JSON headers, rocketbox's
    metrics role scraped every second (RocketMQ's warm-up cut short here: the test checks the rows,
    not the figures)."""
    from tests.integration import javaclient
    if javaclient.missing():
        pytest.skip(javaclient.missing())
    port = 29000 + (os.getpid() % 10) * 300     # its own ports: above the harness's, below the ephemeral range
    r = subprocess.run([sys.executable, "-m", "bench.e2e", "--seconds", "0.5", "--warmup", "0.2",
                        "--rocketmq-warmup", "1", "--modes", "ASYNC_FLUSH", "--rate", "2000", "--port", str(port),
                        "--dir", str(tmp_path), "--box-seconds", "0.5", "--no-grpc"],
                       cwd=ROOT, capture_output=True, text=True, timeout=170)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "errors" not in r.stdout, r.stdout
    rows = {m.group(1).strip(): (float(m.group(2)), float(m.group(3)), float(m.group(4)))
            for m in re.finditer(r"^ASYNC_FLUSH (.+?)\s{2,}(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+", r.stdout, re.M)}
    assert set(rows) == {"send single", "send batch of 32", "send single at 2000/s", "consume"}, r.stdout
    assert all(rb > 0 and rmq > 0 and rd > 0 for rb, rmq, rd in rows.values()), rows
    assert "# e2e benchmark: body=1024B" in r.stdout and "send-headers=JSON metrics=scraped every 1 s " in r.stdout
    assert "Apache RocketMQ 4.9.8" in r.stdout and "warm-up 1 s per row" in r.stdout
    box = re.search(r"^# box: bench.hiccups median chunk (\d+) us CPU over 0.5 s, (\d+) slow windows", r.stdout, re.M)
    assert box and 1 <= int(box.group(1)) < 100_000, r.stdout   # and how fast the box ran first
    assert re.search(r"^# box: .*; free page reporting to the host: .+; DAMON schemes: .+$", r.stdout, re.M), r.stdout
    cpu = re.findall(r"^#   CPU µs/msg rocketbox: (.+) \((\d+)% of a core; load generator (\d+)%\) \| "
                     r"rocketmq: (.+) \(\d+% of a core; load generator \d+%\) \| "
                     r"redis: redis-server ([\d.]+) \(\d+% of a core; load generator (\d+)%\)", r.stdout, re.M)
    assert len(cpu) == 4, r.stdout                              # under every row: where the CPU went
    for roles, pct, gen, rmq, redis_us, redis_gen in cpu:
        us = {k: float(v) for k, v in re.findall(r"(\S+) ([\d.]+)", roles)}
        assert us["reader-0"] + us["reader-1"] > 0 and int(pct) > 0 and float(redis_us) > 0, cpu
        assert float(dict(re.findall(r"(\S+) ([\d.]+)", rmq))["broker"]) > 0, cpu
        assert int(gen) > 0 and int(redis_gen) > 0, cpu         # the generator's share of the box
    sends = [dict(re.findall(r"(\S+) ([\d.]+)", roles)) for roles, *_ in cpu[:3]]
    assert all(float(s["writer"]) > 0 and float(s["dispatcher"]) > 0 for s in sends), sends
    scrapes = re.search(r"^#   rocketbox's /metrics \(its metrics role\): (\d+) scrapes answered, (\d+) failed$",
                        r.stdout, re.M)
    assert scrapes and int(scrapes.group(1)) >= 2 and scrapes.group(2) == "0", r.stdout   # scraped all along


def test_e2e_bench_with_binary_headers_and_no_metrics_role(tmp_path):
    """The ROCKETMQ binary headers, rocketbox without its metrics role (``--metrics-every 0``), and
    Redis alone beside it (``--no-rocketmq``); the gRPC rows, rocketbox's alone, beside its remoting
    single sends."""
    port = 29000 + (os.getpid() % 10) * 300 + 100
    r = subprocess.run([sys.executable, "-m", "bench.e2e", "--seconds", "0.5", "--warmup", "0.2", "--no-rocketmq",
                        "--modes", "ASYNC_FLUSH", "--rate", "2000", "--port", str(port), "--dir", str(tmp_path),
                        "--box-seconds", "0", "--binary", "--metrics-every", "0", "--grpc-client-threads", "2"],
                       cwd=ROOT, capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "errors" not in r.stdout and "send-headers=ROCKETMQ metrics=off " in r.stdout, r.stdout
    rows = {m.group(1).strip(): (float(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"^ASYNC_FLUSH (.+?)\s{2,}(\d+)\s+(\d+)\s+[\d.]+\s", r.stdout, re.M)}
    assert set(rows) == {"send single", "send batch of 32", "send single at 2000/s", "consume"}, r.stdout
    assert all(rb > 0 and rd > 0 for rb, rd in rows.values()), rows
    roles = re.findall(r"^#   CPU µs/msg rocketbox: (.+?) \(", r.stdout, re.M)
    assert len(roles) == 4 and all("reader-0" in line for line in roles), roles
    assert "/metrics" not in r.stdout                             # no metrics role, nothing scraped
    grpc = {m.group(1): float(m.group(2)) for m in re.finditer(
        r"^ASYNC_FLUSH (gRPC .+?)\s{2,}(\d+)\s+[\d.]+/[\d.]+/[\d.]+\s+\(rocketbox only; its remoting send single: (\d+)",
        r.stdout, re.M)}
    assert sorted(grpc) == ["gRPC send (5.x Python client)", "gRPC send single (raw)"] and all(grpc.values()), r.stdout
    assert len(re.findall(r"^#   gRPC CPU µs/msg rocketbox: .*\bgrpc \d", r.stdout, re.M)) == 2, r.stdout


def test_client_bench_prints_the_python_and_java_clients_cpu_per_message(tmp_path):
    from tests.integration import javaclient
    java = javaclient.missing() is None
    port = 29000 + (os.getpid() % 10) * 300 + 150
    r = subprocess.run([sys.executable, "-m", "bench.client", "--messages", "400", "--port", str(port),
                        "--dir", str(tmp_path), *([] if java else ["--no-java"])],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.splitlines()[-1][2:])
    clients = ["python", "java-4.9.8"] if java else ["python"]
    for c in clients:           # every message sent and consumed costs some CPU, and well under a second
        assert all(0 < res[f"{c}_{k}"] < 1e6 for k in ("send_cpu_us", "consume_cpu_us")), res
    assert res["messages"] == 400 and os.listdir(tmp_path) == []


def test_append_bench_prints_its_row_and_figures(tmp_path):
    r = subprocess.run([sys.executable, "-m", "bench.append", "--seconds", "1", "--idle-seconds", "0.5",
                        "--modes", "ASYNC_FLUSH", "--dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=170)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(next(line[2:] for line in r.stdout.splitlines() if line.startswith("# {")))
    assert res["mode"] == "ASYNC_FLUSH" and res["msgs"] > 0 and res["appliance_cpu_us_per_msg"] > 0, res
    assert set(res["role_cpu_us_per_msg"]) >= {"writer", "dispatcher", "flusher"}, res
    assert os.listdir(tmp_path) == []                 # the appliance's temp dir is gone


def test_floor_bench_prints_its_rows_for_the_null_readers_and_redis(tmp_path):
    port = 29000 + (os.getpid() % 10) * 300 + 150     # within test_e2e's block, clear of its ports
    r = subprocess.run([sys.executable, "-m", "bench.floor", "--seconds", "0.5", "--warmup", "0.2", "--rate", "2000",
                        "--port", str(port), "--dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=170)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "errors" not in r.stdout, r.stdout
    assert "# floor benchmark: body=1024B" in r.stdout and "null readers=2 " in r.stdout      # its configuration
    rows = {(m.group(1).strip(), m.group(2).strip()): (int(m.group(3)), int(m.group(4)))
            for m in re.finditer(r"^(.+?)\s{2,}(pipelined|paced 2000/s)\s+(\d+)\s+(\d+)\s+[\d.]+", r.stdout, re.M)}
    servers = ("HAProxy + 2 null readers", "1 null reader, no HAProxy", "redis-server (everysec)")
    assert set(rows) == {(s, row) for s in servers for row in ("pipelined", "paced 2000/s")}, r.stdout
    assert all(got > 0 and redis > 0 for got, redis in rows.values()), rows
    cpu = re.findall(r"^#   CPU µs/msg (.+) \((\d+)% of a core; load generator (\d+)%\)$", r.stdout, re.M)
    assert len(cpu) == 6, r.stdout
    by_process = [dict(re.findall(r"(\S+) ([\d.]+)", line)) for line, *_ in cpu]
    assert set(by_process[0]) == {"haproxy", "null-reader-0", "null-reader-1"}, by_process
    assert set(by_process[2]) == {"null-reader"} and set(by_process[4]) == {"redis-server"}, by_process
    assert os.listdir(tmp_path) == []                 # Redis's and the null appliance's temp dirs are gone


def test_longpoll_bench_holds_wakes_and_prints_each_row(tmp_path):
    port = 29000 + (os.getpid() % 10) * 300 + 275     # clear of e2e's and floor's ports (floor's Redis: +250)
    r = subprocess.run([sys.executable, "-m", "bench.longpoll", "--queues", "64", "--groups", "0,2", "--seconds", "0.5",
                        "--rate", "100", "--port", str(port), "--dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=170)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "# longpoll benchmark: queues=64 groups=0,2 rate=100.0/s" in r.stdout      # its configuration
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", r.stdout, re.M)
    assert [int(row[0]) for row in rows] == [0, 128], r.stdout      # each row's holds all answered, or it fails
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("orderly", [False, True])
def test_rebalance_bench_loses_nothing_while_members_come_and_go(tmp_path, orderly):
    """And orderly members (queue locks) deliver nothing twice."""
    port = 29030 + (os.getpid() % 10) * 300
    r = subprocess.run([sys.executable, "-m", "bench.rebalance", "--groups", "2", "--members", "2", "--queues", "4",
                        "--messages", "600", "--port", str(port), "--dir", str(tmp_path)] + ["--orderly"] * orderly,
                       cwd=ROOT, capture_output=True, text=True, timeout=170)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert f"# rebalance benchmark: groups=2 members=2 queues=4 messages=600 readers=2 orderly={orderly}" in r.stdout
    assert len(re.findall(r"^\d+ (members )?(joined|left)\b.* settled in [\d.]+ s$", r.stdout, re.M)) == 3, r.stdout
    assert re.search(r"^every group had every message +[\d.]+ s after the last send$", r.stdout, re.M), r.stdout
    rows = re.findall(r"^churn(\d) +(\d+) +(\d+) +(\d+)$", r.stdout, re.M)
    assert [(g, int(got), int(missing)) for g, got, missing, _ in rows] == [("0", 600, 0), ("1", 600, 0)], r.stdout
    if orderly:
        assert [int(twice) for *_, twice in rows] == [0, 0], r.stdout
    assert os.listdir(tmp_path) == []


def test_soak_bench_samples_every_role_while_clients_come_and_go(tmp_path):
    port = 29130 + (os.getpid() % 10) * 300
    r = subprocess.run([sys.executable, "-m", "bench.soak", "--seconds", "6", "--every", "2", "--warmup", "0",
                        "--messages", "20", "--port", str(port), "--dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=170)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "# soak benchmark: seconds=6 every=2 warmup=0 messages=20 topics=4x8 groups=6 readers=2" in r.stdout
    header = r.stdout.splitlines()[1].split()
    roles = header[2::2]
    assert {"dispatcher", "flusher", "haproxy", "nameserver", "reader-0", "reader-1", "writer"} <= set(roles), header
    samples = [line.split() for line in r.stdout.splitlines()[2:] if re.match(r"^ +\d+ +\d+ ", line)]
    assert len(samples) >= 3 and all(len(s) == 2 + 2 * len(roles) for s in samples), r.stdout
    assert all(int(v) > 1000 for s in samples for v in s[2::2]), r.stdout      # KiB of heap each role has
    grown = re.findall(r"^(\S+) +[+-]\d+ KiB +[+-][\d.]+ KiB/cycle +[+-]\d+ fds$", r.stdout, re.M)
    assert sorted(grown) == sorted(roles), r.stdout
    cycles = int(samples[-1][1])
    assert cycles >= 1 and f"# {cycles * 20} of {cycles * 20} sends acknowledged over {cycles} cycles" in r.stdout
    assert os.listdir(tmp_path) == []
