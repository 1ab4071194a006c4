"""How steady is this machine's CPU?  Run it alone, with nothing else busy.

A fixed chunk of Python work runs every ``--every-ms`` and its CPU time (``time.thread_time``) is
kept.  On bare metal every chunk costs about the same.  On some VMs, chunks in short windows cost
ten times their median or more.  Those windows slow every process on the box, the appliance's
included, and a send whose path crosses five processes then waits tens of milliseconds.
``/proc/stat``'s steal counter is read around each chunk, to show whether the hypervisor admits it.

Prints the median chunk, the slow chunks (over ``--slow`` x the median) grouped into windows
(chunks less than 50 ms apart), their period, and steal inside and outside them.

It also prices this box's page cache (``page_cache_cost``): ``--page-mib`` of a new file written
with ``pwrite`` in 1 MiB pieces, then the same range again.  The first pass takes a fresh page
for every 4 KiB, the second finds them cached; the CPU per 4 KiB page of each (user and system,
as the writer's own appends pay them).  Without a host in between, a fresh page costs a page
allocation more than a cached one (on this VM, reusing memory freed moments before: ~0.75 µs
against ~0.25).
On a VM whose host takes back the guest's free and idle memory (virtio-balloon free page
reporting; ``/sys/module/page_reporting``), every fresh page is a fault in the host too, and the
guest sees it as system time inside the copy.  There the figure depends on the last seconds:
memory the guest freed moments ago (a deleted store) is still backed and cheap again, so run it
with nothing else having freed memory just before, and with a size past what was.  Last it
prints what takes memory back (``host_reclaim``): free page reporting, and DAMON schemes running
in ``kdamond`` threads, whose passes of up to 12.5 ms on one core show in the appliance's p99.

    .venv/bin/python -m bench.hiccups [--seconds 10] [--every-ms 2] [--slow 3] [--page-mib 1024] [--dir D]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import tempfile
import time

CHUNK_LOOPS = 2000          # ~0.15 ms of CPU on this project's 2-core VM
EVERY_MS = 2                # pause between chunks
SLOW = 3                    # a chunk over this many times the median is slow


def _work() -> int:
    s = 0
    for i in range(CHUNK_LOOPS):
        s += i * i
    return s


def _steal() -> tuple[int, int]:
    """(steal, all) clock ticks of every CPU since boot (/proc/stat's first line)."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:9]]     # user nice system idle iowait irq softirq steal
    return ticks[7], sum(ticks)


def measure(seconds: float, every_s: float = EVERY_MS / 1000, slow: float = SLOW) -> dict:
    chunks = []                 # (wall start, cpu s, steal ticks, all ticks) during the chunk
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s0, a0 = _steal()
        t, c0 = time.monotonic(), time.thread_time()
        _work()
        cpu = time.thread_time() - c0
        s1, a1 = _steal()
        chunks.append((t, cpu, s1 - s0, a1 - a0))
        time.sleep(every_s)
    median = statistics.median(c[1] for c in chunks)
    slow_chunks = [c for c in chunks if c[1] > slow * median]
    windows: list[list] = []
    for c in slow_chunks:
        if windows and c[0] - windows[-1][-1][0] < 0.05:
            windows[-1].append(c)
        else:
            windows.append([c])
    starts = [w[0][0] for w in windows]
    gaps = [b - a for a, b in zip(starts, starts[1:])]

    def steal_share(cs) -> float:
        return 100 * sum(c[2] for c in cs) / max(1, sum(c[3] for c in cs))

    return {"seconds": seconds, "chunks": len(chunks), "median_chunk_us": median * 1e6,
            "slow_chunks": len(slow_chunks), "windows": len(windows),
            "window_period_s": statistics.median(gaps) if gaps else None,
            "window_ms": statistics.median((w[-1][0] - w[0][0]) * 1e3 + w[-1][1] * 1e3 for w in windows) if windows else None,
            "worst_slowdown": max(c[1] for c in chunks) / median,
            "steal_pct_in_windows": steal_share(slow_chunks),
            "steal_pct_outside": steal_share([c for c in chunks if c[1] <= slow * median])}


def page_cache_cost(directory: str | None, mib: int) -> dict:
    """CPU µs per 4 KiB page to ``pwrite`` a new file's first ``mib`` MiB (fresh pages), then the
    same range again (cached pages)."""
    piece = os.urandom(1 << 20)
    fd, path = tempfile.mkstemp(prefix="rbx-hiccups-", dir=directory)
    try:
        passes = []
        for _ in range(2):
            c0 = time.thread_time()
            for i in range(mib):
                os.pwrite(fd, piece, i << 20)
            passes.append((time.thread_time() - c0) / (mib * 256) * 1e6)
    finally:
        os.close(fd)
        os.unlink(path)
    return {"page_mib": mib, "fresh_page_us": passes[0], "cached_page_us": passes[1]}


def host_reclaim() -> dict:
    """What takes this box's memory back behind its processes: the virtio-balloon's free page
    reporting to the host (its order; None when off), and the actions of DAMON schemes running in
    kdamond kernel threads (e.g. ``pageout`` of idle page cache; none when DAMON is off).  On this
    project's VM a kdamond pass ran up to 12.5 ms on one core, and the appliance's processes
    waited up to 9 ms for a CPU meanwhile."""
    try:
        with open("/sys/module/page_reporting/parameters/page_reporting_order") as f:
            reporting = f"order {f.read().strip()}"
    except OSError:
        reporting = None
    actions = []
    for kdamond in sorted(glob.glob("/sys/kernel/mm/damon/admin/kdamonds/[0-9]*")):
        try:
            with open(os.path.join(kdamond, "state")) as f:
                if f.read().strip() != "on":
                    continue
            for path in sorted(glob.glob(os.path.join(kdamond, "contexts/*/schemes/*/action"))):
                with open(path) as f:
                    actions.append(f.read().strip())
        except OSError:
            continue
    return {"free_page_reporting": reporting, "damon_schemes": actions}


def describe_reclaim(r: dict) -> str:
    damon = ", ".join(r["damon_schemes"]) or "none running"
    return f"free page reporting to the host: {r['free_page_reporting'] or 'off'}; DAMON schemes: {damon}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--every-ms", type=float, default=EVERY_MS, help="pause between chunks")
    ap.add_argument("--slow", type=float, default=SLOW, help="a chunk over this many times the median is slow")
    ap.add_argument("--page-mib", type=int, default=1024, help="MiB written twice to price the page cache (0: skip)")
    ap.add_argument("--dir", default=None, help="where that file goes (default: system temp dir)")
    args = ap.parse_args()
    res = measure(args.seconds, args.every_ms / 1000, args.slow)
    if args.page_mib > 0:
        res.update(page_cache_cost(args.dir, args.page_mib))
    res.update(host_reclaim())
    print(f"# CPU steadiness: a {CHUNK_LOOPS}-iteration Python loop every {args.every_ms} ms for {args.seconds} s")
    print(f"median chunk {res['median_chunk_us']:.0f} us CPU; {res['slow_chunks']} of {res['chunks']} chunks over "
          f"{args.slow}x, worst {res['worst_slowdown']:.1f}x")
    if res["windows"]:
        period = f"{res['window_period_s']:.2f} s" if res["window_period_s"] else "-"
        print(f"{res['windows']} slow windows, ~{res['window_ms']:.0f} ms each, one every {period}; steal "
              f"{res['steal_pct_in_windows']:.0f}% of CPU time inside them, {res['steal_pct_outside']:.1f}% outside")
    if args.page_mib > 0:
        print(f"page cache: {res['fresh_page_us']:.2f} us CPU per fresh 4 KiB page, {res['cached_page_us']:.2f} per cached "
              f"one ({args.page_mib} MiB written twice)")
    print(describe_reclaim(res))
    print("# " + json.dumps(res))


if __name__ == "__main__":
    main()
