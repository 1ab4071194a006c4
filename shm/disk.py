"""The store's disks as the cleaner publishes them in the control block (``disk_cl_ppm``,
``disk_cq_ppm``, ``disk_index_ppm``, ``disk_full``), read by whoever answers a refused send."""
from __future__ import annotations

from rocketbox.shm.layout import C


def disk_remark(ctl) -> str:
    """RocketMQ's remark for a send refused because the disk is full (``SendMessageProcessor``'s
    ``diskUtil``: the three ratios, 0..1)."""
    cl, cq, ix = (int(ctl[w]) / 1e6 for w in (C.DISK_CL_PPM, C.DISK_CQ_PPM, C.DISK_INDEX_PPM))
    return ("service not available now. It may be caused by one of the following reasons: the broker's disk is "
            f"full [CL: {cl:5.2f} CQ: {cq:5.2f} INDEX: {ix:5.2f}], messages are put to the slave, message store "
            "has been shut down, etc.")
