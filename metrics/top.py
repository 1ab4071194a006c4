"""``appliance top``: a live terminal view of what ``/metrics`` serves, refreshed every second:
rates in and out, lags, disk, each role's CPU and memory, topics, groups, tables.  It reads the
shared state itself (the metrics role need not run), works over ssh in any terminal curses
knows, and quits on ``q`` or Ctrl-C, leaving the terminal as it was.  ``--once`` prints one
screen (rates over one second) without curses, for scripts.

``screen`` turns two scrapes and the seconds between them into lines; the curses loop only draws
them, so the view is tested without a terminal.
"""
from __future__ import annotations

import sys
import time

from rocketbox.metrics.collect import Collector

Samples = dict[tuple[str, frozenset], float]


def samples(families) -> Samples:
    """A scrape's families -> {(name, labels): value} (a histogram by its ``_sum`` and ``_count``)."""
    out: Samples = {}
    for f in families:
        for labels, v in f.samples:
            key = frozenset(labels.items())
            if f.kind != "histogram":
                out[(f.name, key)] = float(v)    # type: ignore[arg-type]
                continue
            counts, total = v                    # type: ignore[misc]
            out[(f.name + "_sum", key)], out[(f.name + "_count", key)] = float(total), float(sum(counts))
    return out


def _by(s: Samples, name: str, *keys: str, **want: str) -> dict:
    """``name``'s samples (those whose labels include ``want``) by the value of label ``keys[0]``,
    or by the tuple of several labels' values."""
    out = {}
    for (n, labels), v in s.items():
        if n == name and set(want.items()) <= labels:
            d = dict(labels)
            out[d[keys[0]] if len(keys) == 1 else tuple(d[k] for k in keys)] = v
    return out


def _one(s: Samples, name: str, **want: str) -> float:
    for (n, labels), v in s.items():
        if n == name and set(want.items()) <= labels:
            return v
    return 0.0


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _clients(s: Samples) -> str:
    conns = _by(s, "rocketbox_client_connections", "of")
    return f"   clients {conns['open']:,.0f} of {conns['limit']:,.0f}" if "open" in conns and "limit" in conns else ""


def _rate(cur: float, prev: float | None, dt: float) -> float:
    return max(0.0, cur - prev) / dt if prev is not None and dt > 0 else 0.0


def _mean(cur: Samples, prev: Samples, name: str) -> float | None:
    """A histogram's mean over the values observed between the two scrapes; None without any."""
    n = _one(cur, name + "_count") - _one(prev, name + "_count")
    return (_one(cur, name + "_sum") - _one(prev, name + "_sum")) / n if n > 0 else None


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.2f} ms"


def _latencies(cur: Samples, prev: Samples) -> str:
    wait, put, flush, batch = (_mean(cur, prev, n) for n in ("rocketbox_ring_wait_seconds", "rocketbox_put_latency_seconds",
                                                             "rocketbox_flush_latency_seconds", "rocketbox_commit_records"))
    size = "-" if batch is None else f"{batch:.1f}"
    return (f"ring wait {_ms(wait)}   put latency {_ms(put)}   flush {_ms(flush)}   group commit {size} records"
            "   (means over the last refresh)")


def _rings(cur: Samples) -> str:
    used, cap = (_by(cur, "rocketbox_ring_bytes", "owner", "ring", of=of) for of in ("used", "capacity"))
    return "rings: " + "   ".join(f"{o} {r[:3]} {_size(v)}/{_size(cap.get((o, r), 0))}" for (o, r), v in sorted(used.items()))


def screen(prev: Samples, cur: Samples, dt: float, title: str, width: int = 100) -> list[str]:
    """The view's lines: ``cur`` against ``prev`` taken ``dt`` seconds before."""
    msg_in, in_prev = (_by(s, "rocketmq_messages_in_total", "topic") for s in (cur, prev))
    outs, outs_prev = (_by(s, "rocketmq_messages_out_total", "consumer_group", "topic") for s in (cur, prev))
    lags = _by(cur, "rocketmq_consumer_lag_messages", "consumer_group", "topic")
    members = _by(cur, "rocketmq_consumer_connections", "consumer_group")
    total_in = sum(_rate(v, in_prev.get(t), dt) for t, v in msg_in.items())
    total_out = sum(_rate(v, outs_prev.get(k), dt) for k, v in outs.items())
    disk = _by(cur, "rocketbox_disk_used_ratio", "partition")
    limits = _by(cur, "rocketbox_disk_limit_ratio", "limit")
    lines = [
        f"{title}   {time.strftime('%H:%M:%S')}   q: quit",
        f"messages in {total_in:,.0f}/s   out {total_out:,.0f}/s   dispatch lag "
        f"{_size(_one(cur, 'rocketbox_dispatch_lag_bytes'))}   flush lag {_size(_one(cur, 'rocketbox_flush_lag_bytes'))}"
        f"   sends refused: {'YES' if _one(cur, 'rocketbox_sends_refused') else 'no'}" + _clients(cur),
        "disk used: " + "  ".join(f"{p} {'?' if r < 0 else f'{r:.1%}'}" for p, r in sorted(disk.items()))
        + f"   (sends refused above {limits.get('warning', 0):.0%}, retention above {limits.get('retention', 0):.0%})",
        _latencies(cur, prev),
        _rings(cur),
        "",
        f"{'ROLE':<12} {'UP':<4} {'CPU%':>6} {'RSS':>10}",
    ]
    cpu, prev_cpu = _by(cur, "rocketbox_role_cpu_seconds_total", "role"), _by(prev, "rocketbox_role_cpu_seconds_total", "role")
    rss = _by(cur, "rocketbox_role_memory_bytes", "role")
    for role, up in _by(cur, "rocketbox_role_up", "role").items():
        pct = _rate(cpu.get(role, 0), prev_cpu.get(role), dt) * 100
        lines.append(f"{role:<12} {'up' if up else 'DOWN':<4} {pct:>6.1f} {_size(rss.get(role, 0)):>10}")
    lines += ["", f"{'TOPIC':<40} {'IN/s':>10} {'TOTAL':>14}"]
    busiest = sorted(msg_in, key=lambda t: (-_rate(msg_in[t], in_prev.get(t), dt), t))
    lines += [f"{t[:40]:<40} {_rate(msg_in[t], in_prev.get(t), dt):>10,.0f} {msg_in[t]:>14,.0f}" for t in busiest[:15]]
    lines += ["", f"{'GROUP':<28} {'TOPIC':<28} {'OUT/s':>9} {'LAG':>10} {'MEMBERS':>8}"]
    for g, t in sorted(outs, key=lambda k: (-lags.get(k, 0), k))[:15]:
        lines.append(f"{g[:28]:<28} {t[:28]:<28} {_rate(outs[(g, t)], outs_prev.get((g, t)), dt):>9,.0f} "
                     f"{lags.get((g, t), 0):>10,.0f} {members.get(g, 0):>8.0f}")
    used, cap = (_by(cur, "rocketbox_table_entries", "table", of=of) for of in ("used", "capacity"))
    lines += ["", "tables: " + "   ".join(f"{t} {used[t]:,.0f}/{cap.get(t, 0):,.0f}" for t in used)]
    return [line[:width] for line in lines]


class Top:
    def __init__(self, cfg, sh, roles: list[str]):
        self.collector = Collector(cfg, sh, roles)
        self.title = f"rocketbox top: broker {cfg.brokerName} (cluster {cfg.brokerClusterName})"
        self.prev, self.at = samples(self.collector.families()), time.monotonic()

    def lines(self, width: int) -> list[str]:
        cur, now = samples(self.collector.families()), time.monotonic()
        out = screen(self.prev, cur, now - self.at, self.title, width)
        self.prev, self.at = cur, now
        return out


def run(cfg, once: bool = False) -> int:
    from rocketbox.appliance.roles import roles_for
    from rocketbox.shm.state import SharedState
    try:
        sh = SharedState(cfg.geometry()).attach()
    except Exception as e:
        print(f"appliance top: the appliance of {cfg.root} is not running ({e})", file=sys.stderr)
        return 1
    top = None
    try:
        top = Top(cfg, sh, roles_for(cfg))
        if once:
            time.sleep(1.0)
            print("\n".join(top.lines(200)))
            return 0
        import curses
        try:
            curses.wrapper(_loop, top)
        except KeyboardInterrupt:
            pass
        return 0
    finally:
        if top is not None:
            top.collector.close()
        sh.close()


def _loop(stdscr, top: Top) -> None:
    import curses
    curses.curs_set(0)
    stdscr.timeout(1000)                    # a key, or the next refresh
    lines = top.lines(stdscr.getmaxyx()[1] - 1)
    while True:
        height, width = stdscr.getmaxyx()
        stdscr.erase()
        for y, line in enumerate(lines[:height]):
            stdscr.addnstr(y, 0, line, max(0, width - 1))
        stdscr.refresh()
        key = stdscr.getch()
        if key in (ord("q"), ord("Q")):
            return
        if key == -1:                       # the second is up
            lines = top.lines(width - 1)
