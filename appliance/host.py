"""The host tuned for the store, as RocketMQ's own ``distribution/bin/os.sh`` tunes it
(FACTS-wave2 §7): the sysctls, the I/O scheduler of the block device that holds the store, and
its read-ahead.  ``appliance host --check`` prints each setting, wanted and actual; ``--apply``
sets them now (what the host refuses, a container's read-only ``/proc/sys`` or ``/sys``, is said
and skipped); ``install.sh`` writes ``/etc/sysctl.d/60-rocketbox.conf`` (``sysctl_file``) and a
udev rule (``udev_rule``) so they hold across reboots.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

SCHEDULER = "mq-deadline"       # os.sh's "deadline" on blk-mq kernels
READ_AHEAD_KB = 128             # SSDs: the CommitLog is read where consumers are, not far ahead


def _min_free_kbytes() -> int:
    """1 % of memory, between 64 MiB and 1 GiB: room the kernel keeps free so a burst of page
    cache growth (a consumer catching up from disk) does not stall the writer in direct reclaim."""
    with open("/proc/meminfo") as f:
        total_kb = int(next(line for line in f if line.startswith("MemTotal:")).split()[1])
    return max(65_536, min(total_kb // 100, 1_048_576))


# (sysctl, wanted value or a function of the host, why)
SYSCTLS = (
    ("vm.overcommit_memory", 1, "os.sh: mapping 1 GiB CommitLog files and the shared rings never fails on the "
                                "kernel's guess of what memory may be needed"),
    ("vm.swappiness", 1, "os.sh: keep the roles' heaps and the hot page cache out of swap"),
    ("vm.max_map_count", 655_360, "os.sh: every mapped CommitLog, ConsumeQueue and IndexFile is a mapping, in "
                                  "every process that reads it"),
    ("vm.dirty_background_ratio", 50, "os.sh: the flusher role decides when the store is written "
                                      "(flushDiskType), not the kernel's background writeback"),
    ("vm.dirty_ratio", 50, "os.sh: a writer is throttled by the kernel only when half of memory is dirty"),
    ("vm.dirty_writeback_centisecs", 360_000, "os.sh: the kernel's writeback wakes hourly; the flusher syncs the "
                                              "store itself"),
    ("vm.dirty_expire_centisecs", 360_000, "as writeback: pages of the store do not expire into the kernel's "
                                           "writeback before the flusher writes them"),
    ("vm.min_free_kbytes", _min_free_kbytes, "1 % of memory (64 MiB..1 GiB) kept free: no direct-reclaim stall "
                                             "of the writer when the page cache grows fast"),
    ("vm.zone_reclaim_mode", 0, "os.sh: reclaim from other NUMA nodes' page cache rather than stall"),
    ("vm.page-cluster", 3, "os.sh: swap in 8 pages at a time"),
)


@dataclass
class Setting:
    name: str
    wanted: str
    actual: str | None          # None: cannot be read here
    why: str
    path: str | None = None     # the file that sets it; None: nothing here can

    @property
    def holds(self) -> bool:
        return self.actual is not None and self.actual.split() == self.wanted.split()


def _wanted(v) -> str:
    return str(v() if callable(v) else v)


def _sysctl_path(name: str) -> str:
    return os.path.join("/proc/sys", *name.split("."))


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def store_device(path: str) -> str | None:
    """The block device (its /sys/block name: the whole disk, not a partition) that holds
    ``path`` (the nearest existing directory up from it); None when it is not a block device
    (tmpfs, overlay, a container's filesystem)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and path != "/":
        path = os.path.dirname(path)
    dev = os.stat(path).st_dev
    link = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    if not os.path.exists(link):
        return None
    real = os.path.realpath(link)
    if os.path.exists(os.path.join(real, "partition")):
        real = os.path.dirname(real)                # a partition: its disk has the queue
    name = os.path.basename(real)
    return name if os.path.isdir(f"/sys/block/{name}/queue") else None


def _scheduler(dev: str) -> str | None:
    text = _read(f"/sys/block/{dev}/queue/scheduler")
    if text is None:
        return None
    chosen = [w[1:-1] for w in text.split() if w.startswith("[")]
    return chosen[0] if chosen else text


def settings(*store_dirs: str) -> list[Setting]:
    """Every tuned setting of this host for a store in ``store_dirs`` (the root, and the
    CommitLog's directory when it is elsewhere: each disk gets the scheduler)."""
    out = [Setting(name, _wanted(v), _read(_sysctl_path(name)), why, _sysctl_path(name)) for name, v, why in SYSCTLS]
    devs: dict[str | None, str] = {}          # device (None: none) -> the first store dir on it
    for d in store_dirs:
        devs.setdefault(store_device(d), d)
    for dev, d in devs.items():
        if dev is None:
            out.append(Setting("io scheduler", SCHEDULER, None, f"the store ({d}) is on no block device here"))
            continue
        sched, ahead = f"/sys/block/{dev}/queue/scheduler", f"/sys/block/{dev}/queue/read_ahead_kb"
        out.append(Setting(sched, SCHEDULER, _scheduler(dev),
                           "the store's disk: reads are not starved by the flusher's writes (os.sh: deadline)", sched))
        out.append(Setting(ahead, str(READ_AHEAD_KB), _read(ahead),
                           "SSD: consumers read where they are; a long read-ahead only evicts hot pages", ahead))
    return out


def apply(*store_dirs: str) -> tuple[list[str], list[str]]:
    """Set every setting that does not hold now -> (a line per setting changed, a line per
    setting the host refused or that nothing here can set)."""
    changed, refused = [], []
    for s in settings(*store_dirs):
        if s.holds:
            continue
        if s.path is None:
            refused.append(f"{s.name}: cannot be set here ({s.why})")
            continue
        try:
            with open(s.path, "w") as f:
                f.write(s.wanted)
            changed.append(f"{s.name}: {s.actual} -> {s.wanted}")
        except OSError as e:
            refused.append(f"{s.name}: the host refused {s.wanted} ({e.strerror}); left at {s.actual}")
    return changed, refused


def sysctl_file() -> str:
    """/etc/sysctl.d/60-rocketbox.conf: each setting with its reason."""
    out = ["# rocketbox: the host tuned for the store, as RocketMQ's distribution/bin/os.sh tunes it.",
           "# Written by install.sh (appliance/host.py); `install.sh --check` shows what holds.", ""]
    for name, v, why in SYSCTLS:
        out += [f"# {why}", f"{name} = {_wanted(v)}", ""]
    return "\n".join(out)


def udev_rule(devs: list[str | None]) -> str:
    """A udev rule keeping the store disks' scheduler and read-ahead across reboots."""
    names = [d for d in devs if d]
    match = f'KERNEL=="{"|".join(names)}"' if names else 'KERNEL=="sd[a-z]|nvme[0-9]n[0-9]|vd[a-z]"'
    return ("# rocketbox: the store's disks, mq-deadline and a short read-ahead (appliance/host.py)\n"
            f'ACTION=="add|change", SUBSYSTEM=="block", {match}, ATTR{{queue/scheduler}}="{SCHEDULER}", '
            f'ATTR{{queue/read_ahead_kb}}="{READ_AHEAD_KB}"\n')


def disable_thp() -> None:
    """Transparent huge pages off for this process and its children (PR_SET_THP_DISABLE): the
    store's mappings and the rings are touched page by page, and a huge page's compaction stall or
    its 2 MiB of memory for a 4 KiB touch buys nothing here."""
    try:
        import ctypes
        ctypes.CDLL(None).prctl(41, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(args, cfg) -> int:
    if args.apply:
        changed, refused = apply(*cfg.data_dirs)
        for line in changed + refused:
            print(line)
    rows = settings(*cfg.data_dirs)
    print(f"{'#Setting':<42} {'#Wanted':>12} {'#Actual':>14}  #Holds")
    for s in rows:
        print(f"{s.name:<42} {s.wanted:>12} {s.actual if s.actual is not None else '?':>14}  "
              f"{'yes' if s.holds else 'no'}")
    off = [s for s in rows if not s.holds]
    print(f"{len(rows) - len(off)} of {len(rows)} settings hold" + ("" if not off else
          "; `install.sh` (as root) sets them, or `appliance host --apply`"))
    return 0 if not off else 1
