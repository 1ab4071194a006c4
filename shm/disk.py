"""The store's disks: how full a partition is, as RocketMQ tells it, and as the cleaner publishes
it in the control block (``disk_cl_ppm``, ``disk_cq_ppm``, ``disk_index_ppm``, ``disk_full``), read
by whoever answers a refused send."""
from __future__ import annotations

import math
import os

from rocketbox.shm.layout import C


def used_ratio(path: str) -> float:
    """How full the partition holding ``path`` (or its nearest existing parent) is, 0..1, as
    ``df`` and RocketMQ compute it; -1 when it cannot be told."""
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        st = os.statvfs(path or "/")
    except OSError:
        return -1.0
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    usable = st.f_bavail * st.f_frsize
    if used + usable <= 0:
        return -1.0
    return math.ceil(used * 100 / (used + usable)) / 100


def capacity(path: str) -> tuple[int, int]:
    """(total bytes, bytes an unprivileged writer may still use) of the partition holding ``path``."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def human_bytes(n: int) -> str:
    """RocketMQ's ``MixAll.humanReadableByteCount(n, false)``: "190 B", "1.5 KiB", "252.0 GiB"."""
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n) / math.log(1024)), 6)
    return f"{n / 1024 ** exp:.1f} {'KMGTPE'[exp - 1]}iB"


def disk_remark(ctl) -> str:
    """RocketMQ's remark for a send refused because the disk is full (``SendMessageProcessor``'s
    ``diskUtil``: the three ratios, 0..1)."""
    cl, cq, ix = (int(ctl[w]) / 1e6 for w in (C.DISK_CL_PPM, C.DISK_CQ_PPM, C.DISK_INDEX_PPM))
    return ("service not available now. It may be caused by one of the following reasons: the broker's disk is "
            f"full [CL: {cl:5.2f} CQ: {cq:5.2f} INDEX: {ix:5.2f}], messages are put to the slave, message store "
            "has been shut down, etc.")
