"""AllocateMessageQueueAveragely (FACTS §12): which of the sorted queues a consumer owns."""
from __future__ import annotations

from typing import TypeVar

Q = TypeVar("Q")


def _java_order(s: str) -> bytes:
    return s.encode("utf-16-be")          # String.compareTo: UTF-16 code units


def allocate_averagely(current: str, queues: list[Q], cids: list[str]) -> list[Q]:
    """``queues`` sorted by (topic, brokerName, queueId) and ``cids`` sorted as Java strings first."""
    if not queues or not cids or current not in cids:
        return []
    cids = sorted(cids, key=_java_order)
    n, c, index = len(queues), len(cids), cids.index(current)
    mod = n % c
    if n <= c:
        size = 1
    elif mod > 0 and index < mod:
        size = n // c + 1
    else:
        size = n // c
    start = index * size if (mod > 0 and index < mod) else index * size + mod
    return [queues[(start + i) % n] for i in range(min(size, n - start))]
