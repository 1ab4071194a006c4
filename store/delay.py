"""Delay levels (FACTS §9.1, FACTS-wave2 §2.1; store:schedule/ScheduleMessageService.java): the
names and rules the send path, the dispatcher and the scheduler share.

A message whose ``DELAY`` property is a level n > 0 (n past the last level: the last) is stored in
``SCHEDULE_TOPIC_XXXX`` queue n-1, with ``REAL_TOPIC`` and ``REAL_QID`` saying where it goes; its
consume-queue tag code is its delivery time, the store timestamp plus level n's delay.  When that
time comes the scheduler stores it again, in its real topic and queue, with the same properties.
"""
from __future__ import annotations

from rocketbox.store import message

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
SCHEDULE_TOPIC_BYTES = SCHEDULE_TOPIC.encode()
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"       # a delayed message bound for it is dropped, as 4.9.8 does
DELAY, REAL_TOPIC, REAL_QID = b"DELAY", b"REAL_TOPIC", b"REAL_QID"
SCHEDULE_QUEUES = 18                          # SCHEDULE_TOPIC_XXXX's queues with the default levels


def level_of(value: bytes | None) -> int:
    """The level a ``DELAY`` property asks for: 0 when absent or empty (Java's parse of the
    properties drops a pair with an empty value); ValueError when not a whole number as Java's
    ``Integer.parseInt`` reads one (no spaces, no ``_``)."""
    if not value:
        return 0
    try:
        return message.java_long(value, 32)
    except ValueError:
        raise ValueError(f"the DELAY property {value.decode('utf-8', 'replace')!r} is not a delay level (a whole number)") \
            from None


def deliver_ts(store_ts: int, level: int, delays_ms: tuple[int, ...]) -> int:
    """When a message stored at ``store_ts`` with ``level`` (1-based, clamped) is due."""
    return store_ts + delays_ms[min(level, len(delays_ms)) - 1]


def scheduled_properties(props: bytes, level: int, max_level: int, topic: str, queue_id: int) -> bytes:
    """A delayed message's stored properties: ``DELAY`` clamped to the last level, ``REAL_TOPIC``
    and ``REAL_QID`` set (replaced where a message delayed before, then sent back, carries them
    already), as Java's putProperty sets them."""
    updates = {REAL_TOPIC: topic.encode(), REAL_QID: b"%d" % queue_id}
    if level > max_level:
        updates = {DELAY: b"%d" % max_level, **updates}
    return message.with_properties(props, updates)
