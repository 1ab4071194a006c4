"""``appliance`` command line: start | status | check | quarantine | run ROLE | produce | consume."""
from __future__ import annotations

import argparse
import os
import sys

from rocketbox.appliance import config as config_mod
from rocketbox.appliance.process import process_name
from rocketbox.appliance.roles import pid_path, raise_open_files_limit, roles_for, run_role

# (control word, what it counts); the words by name: importing the shared layout (numpy) is left to
# the commands and roles that attach it, so the name server's and HAProxy's processes start lighter
STORE_COUNTS = (("DISPATCH_UNINDEXED", "records dispatched without index keys"),
                ("DISPATCH_UNQUEUED", "records left out of their queue"),
                ("RETENTION_UNCONSUMED", "messages deleted by retention before a group consumed them"))


def _unit(pid: int) -> str:
    """The systemd unit running ``pid`` (from its control group), or '' when systemd does not."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            paths = [line.rstrip("\n").split(":", 2)[2] for line in f]
    except (OSError, IndexError):
        return ""
    for path in paths:
        for part in reversed(path.split("/")):
            if part.endswith(".service"):
                return part
    return ""


def _tables(cfg, every: bool) -> None:
    """The shared tables' use: each one with ``every`` (``status --tables``), else only those
    near full (90%), with the key that sizes them; and what the store could not do as it should
    (``STORE_COUNTS``), each case logged by its role with its offsets."""
    from rocketbox.shm.state import SharedState
    from rocketbox.shm.tables import table_use
    try:
        sh = SharedState(cfg.geometry()).attach()
    except Exception:                         # not running: nothing to show
        return
    try:
        rows = table_use(sh.views, sh.control)
        from rocketbox.shm.layout import C
        counts = [(int(sh.control[getattr(C, f)]), what) for f, what in STORE_COUNTS]
    finally:
        sh.close()
    print("; ".join(f"{n} {what}" for n, what in counts) + " (since the start)")
    if every:
        print(f"{'#table':<31} {'#used':>9} {'#capacity':>10} {'#full':>6}  {'#sized by':<15} {'#shared memory':>14}")
    for t in rows:
        if every:
            print(f"{t.name:<31} {t.used:>9} {t.capacity:>10} {100 * t.used / t.capacity:>5.1f}%  {t.key:<15} "
                  f"{t.nbytes / 2**20:>10.1f} MiB")
        elif t.near_full:
            print(t.warning())


def _status(cfg, tables: bool = False) -> int:
    """Each role: up or down, its pid, and the systemd unit that runs it (none under ``appliance
    start``); "supervisor" is the supervisor or, under systemd, the store's keeper."""
    import psutil
    all_up, roles = True, roles_for(cfg)
    for role in ["supervisor", *roles]:
        pid, state = None, "down"
        try:
            with open(pid_path(cfg, role)) as f:
                pid = int(f.read().strip())
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE and p.name() == process_name(role):
                state = "up"
        except (OSError, ValueError, psutil.Error):
            pass
        all_up &= state == "up"
        unit = _unit(pid) if state == "up" and pid else ""
        print(f"{role:<11} {state:<5} pid {pid if pid else '-'}" + (f"  {unit}" if unit else ""))
    _tables(cfg, tables)
    if "haproxy" in roles:
        from rocketbox.haproxy.service import admission_limit, connections, frontend_stats
        row = frontend_stats(cfg)
        if row is not None:
            refused, now, maxconn = connections(row)
            limit = admission_limit(maxconn)
            near = " NEAR FULL (raise LimitNOFILE / ulimit -n)" if now >= 0.9 * limit else ""
            print(f"connections {now} of {limit}, {refused} refused at the limit since HAProxy started{near}")
    return 0 if all_up else 1


def _transactions(cfg) -> int:
    """The open transactions, oldest first: each half message with its age and check-backs."""
    import time

    from rocketbox.scheduler.transactions import pending
    from rocketbox.shm.state import SharedState
    from rocketbox.store.view import StoreView
    try:
        sh = SharedState(cfg.geometry()).attach()
    except Exception as e:
        print(f"appliance transactions: the appliance of {cfg.root} is not running ({e})", file=sys.stderr)
        return 1
    view = StoreView(cfg, sh, name="appliance transactions").open()
    try:
        rows = pending(cfg, view)
    finally:
        view.close()
        sh.close()
    now = int(time.time() * 1000)
    print(f"{'#halfOffset':<12} {'#age s':>9} {'#checks':>7}  {'#group':<24} {'#topic':<24} #msgId")
    for p in rows:
        print(f"{p.half_offset:<12} {(now - p.born_ms) / 1000:>9.1f} {p.checks:>7}  {p.group:<24} {p.topic:<24} {p.msg_id}")
    print(f"{len(rows)} open transactions (checked back after transactionTimeOut {cfg.transactionTimeOut} ms, every "
          f"{cfg.transactionCheckInterval} ms, discarded after {cfg.transactionCheckMax} checks)")
    return 0


def _check(cfg) -> int:
    from rocketbox.appliance import check
    return check.main(cfg)


def _accept_gap(cfg) -> int:
    from rocketbox.appliance import check
    return check.accept_gap(cfg)


def _quarantine(cfg) -> int:
    """What the store lost to damage (``store/quarantine.py``), one line a span."""
    from rocketbox.store import quarantine
    try:
        entries = quarantine.load(cfg.root)
    except ValueError as e:
        print(f"appliance quarantine: {e}", file=sys.stderr)
        return 2
    for entry in entries:
        whose = (f"{entry['topic']} queue {entry['queueId']} offset {entry['queueOffset']}"
                 if entry.get("queueOffset") is not None else "queue unknown")
        print(f"offset {entry['offset']} ({entry['file']} @ {entry['fileOffset']}), {entry['length']} bytes, {whose} "
              f"[{entry['identity']}]: {entry['reason']}; found by {entry['foundBy']}; original bytes: "
              f"{entry['bytes'] or 'not saved'}")
    print(f"{len(entries)} damaged spans quarantined" if entries else "nothing quarantined")
    return 0


def _scrub(cfg, rate_mb: float) -> int:
    """One scrub pass over the whole CommitLog now (``cleaner.service.Scrubber``), at ``rate_mb``
    MB/s (0: as fast as it reads); safe beside a running appliance (it only reads)."""
    import logging
    import time

    from rocketbox.cleaner.service import Scrubber
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    s = Scrubber(cfg, "scrub")
    s.cl.load()
    if not s.cl.files:
        print(f"appliance scrub: no store at {cfg.root}: {cfg.commitlog_dir} holds no CommitLog file")
        return 2
    limit = s.cl.files[-1].end
    t0, done = time.monotonic(), 0
    try:
        while (n := s.step(4 << 20, limit, s.cl.min_offset)):
            done += n
            if rate_mb:
                ahead = done / (rate_mb * 1e6) - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
    finally:
        s.close()
    took = time.monotonic() - t0
    print(f"scrubbed {done / 1e6:.1f} MB in {took:.1f} s ({done / 1e6 / max(took, 1e-9):.0f} MB/s): "
          f"{s.damaged} damaged records" + (" (listed by appliance quarantine)" if s.damaged else ""))
    return 1 if s.damaged else 0


def main(argv=None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:     # e.g. `appliance status | head`: whoever read our output has gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # so the exit flush stays quiet
        return 1


_REPORTS = {"quarantine": _quarantine, "transactions": _transactions, "check": _check, "accept-gap": _accept_gap}


def _main(argv) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["units"]:                    # its own options (appliance units --help)
        from rocketbox.appliance import units
        return units.main(argv[1:])
    ap = argparse.ArgumentParser(prog="appliance", description="rocketbox appliance")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, text in (("start", "run every role in the foreground until SIGTERM/SIGINT"),
                       ("status", "print each role with its pid, the connections and any table near full; "
                                  "exit 0 only when all roles are up"),
                       ("check", "verify a stopped store: records, consume queues, index"),
                       ("quarantine", "list what the store lost to damage, and where the original bytes are"),
                       ("transactions", "the open transactions (half messages neither committed nor rolled back): "
                                        "age, check-backs, producer group, topic"),
                       ("accept-gap", "on a stopped store whose CommitLog misses a file (start-up refuses it): "
                                      "accept the loss, keep and serve everything after it")):
        p = sub.add_parser(name, help=text)
        p.add_argument("-c", "--config", help="broker.conf (default: built-in defaults)")
        if name == "status":
            p.add_argument("--tables", action="store_true", help="every shared table: used, capacity, the key "
                                                                 "that sizes it, its shared memory")
    from rocketbox.client import cli as client_cli
    client_cli.add_arguments(sub)
    p = sub.add_parser("top", help="a live view: rates, lags, disk, each role's CPU and memory, topics, groups "
                                   "(q or Ctrl-C quits)")
    p.add_argument("-c", "--config")
    p.add_argument("--once", action="store_true", help="print one screen (rates over a second) and exit")
    p = sub.add_parser("scrub", help="verify every CommitLog record now; damage is logged and quarantined")
    p.add_argument("-c", "--config")
    p.add_argument("--rate", type=float, default=0, help="MB/s at most (default: as fast as it reads)")
    p = sub.add_parser("stopping", help="under systemd: mark the coming stop as the whole appliance's "
                                        "(rocketbox-stopping.service's ExecStop)")
    p.add_argument("-c", "--config")
    p = sub.add_parser("run", help="run one role (what systemd units call); 'store': the store's keeper "
                                   "(lock, shared memory, recovery), the roles left to systemd")
    p.add_argument("role")
    p.add_argument("-c", "--config")
    p = sub.add_parser("host", help="the host's tuning for the store (sysctls, the store disk's I/O scheduler): "
                                    "wanted, actual, whether it holds; exit 1 when one does not")
    p.add_argument("-c", "--config")
    p.add_argument("--apply", action="store_true", help="set what does not hold now (root)")
    p = sub.add_parser("spark", help="a Spark job over the store's files: audit, export, lag, search "
                                     "(appliance spark JOB --help); --path defaults to the config's store")
    p.add_argument("job", choices=("audit", "export", "lag", "search"))
    p.add_argument("-c", "--config")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the job's own arguments")
    args = ap.parse_args(argv)
    if args.cmd == "spark":                      # -c after the job's name is ours, not the job's
        for flag in ("-c", "--config"):
            if flag in args.rest[:-1]:
                i = args.rest.index(flag)
                args.config = args.rest[i + 1]
                del args.rest[i:i + 2]
    try:
        cfg = config_mod.load(args.config)
    except config_mod.ConfigError as e:
        print(f"appliance: configuration error: {e}", file=sys.stderr)
        return 2
    if args.cmd == "status":
        return _status(cfg, args.tables)
    if args.cmd == "scrub":
        return _scrub(cfg, args.rate)
    if args.cmd == "top":
        from rocketbox.metrics import top
        return top.run(cfg, args.once)
    if args.cmd in ("quarantine", "transactions", "check", "accept-gap"):
        return _REPORTS[args.cmd](cfg)
    if args.cmd == "host":
        from rocketbox.appliance import host
        return host.main(args, cfg)
    if args.cmd == "spark":
        import importlib
        job = importlib.import_module(f"rocketbox.spark.jobs.{args.job}")
        rest = args.rest if "--path" in args.rest else ["--path", cfg.root, *args.rest]
        return job.main(rest)
    if args.cmd in ("start", "run"):
        raise_open_files_limit()
    if args.cmd == "run" and args.role == "store":
        from rocketbox.appliance import supervisor
        return supervisor.run(cfg, args.config, spawn=False)
    if args.cmd == "run":
        return run_role(args.role, cfg)
    if args.cmd == "stopping":
        from rocketbox.appliance import supervisor
        return supervisor.mark_stopping(cfg)
    if args.cmd in client_cli.COMMANDS:
        return client_cli.main(args, cfg)
    from rocketbox.appliance import supervisor
    return supervisor.run(cfg, args.config)


if __name__ == "__main__":
    sys.exit(main())
