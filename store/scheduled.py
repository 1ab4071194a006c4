"""What the scheduler has published of its progress, for whoever reports it (GET_BROKER_RUNTIME_INFO,
the metrics role): each delay level's next queue offset to deliver (``config/delayOffset.json``,
RocketMQ's file) and its pending timers with the next one's due time (``config/timerCheckpoint.json``,
the scheduler's own).  Read from the files the scheduler writes, so a reader costs it nothing; a
file that is missing or unreadable reads as nothing published yet.
"""
from __future__ import annotations

import os
from typing import NamedTuple

from rocketbox.store import configfile


class Progress(NamedTuple):
    delivered: dict[int, int]       # delay level -> next queue offset of SCHEDULE_TOPIC_XXXX's queue level-1
    timers_pending: int | None      # None: no timer checkpoint yet
    timer_next_due_ms: int          # 0: none pending


def _read(path: str) -> dict:
    try:
        return configfile.read(path) or {}
    except Exception:             # (being replaced, or damaged: the scheduler rewrites it)
        return {}


def read(config_dir: str) -> Progress:
    table = _read(os.path.join(config_dir, "delayOffset.json")).get("offsetTable") or {}
    delivered = {}
    for level, offset in table.items():
        try:
            delivered[int(level)] = int(offset)
        except (TypeError, ValueError):
            continue
    cp = _read(os.path.join(config_dir, "timerCheckpoint.json"))
    if not cp:
        return Progress(delivered, None, 0)
    return Progress(delivered, int(cp.get("pending", 0)), int(cp.get("nextDueMs", 0)))
