"""Timers: delays to any time, as RocketMQ 5.x's message properties ask (FACTS-wave2 §2.2;
common:message/MessageConst.java, broker:util/HookUtils.java), the names and rules the send path,
the dispatcher, the scheduler and the cancel request share.

A message with ``TIMER_DELAY_SEC``, ``TIMER_DELAY_MS`` or ``TIMER_DELIVER_MS`` (that precedence;
a ``DELAY`` level wins over all three, which are then removed) due later than now is stored in
``rmq_sys_wheel_timer`` queue 0 with ``TIMER_OUT_MS`` (its delivery time, epoch ms), ``REAL_TOPIC``
and ``REAL_QID``; the dispatcher writes ``TIMER_OUT_MS`` as the entry's tag code.  One due now or
earlier is stored as sent, at once.  The horizon is ``timerMaxDelaySec`` (default 400 days;
5.x's is 3 days): past it the send is refused with 5.x's code and remark.

A cancellation is a marker record in the same queue: ``TIMER_DEL_UNIQKEY`` (``<topic>_<msgId>``,
as 5.x writes it) and ``TIMER_DEL_OFFSET``, the CommitLog offset of the timer it cancels; its tag
code is ``-(offset + 1)``, so the scheduler tells markers from timers by the sign alone.
"""
from __future__ import annotations

from rocketbox.store import message

TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMER_TOPIC_BYTES = TIMER_TOPIC.encode()
DELIVER_MS, DELAY_SEC, DELAY_MS = b"TIMER_DELIVER_MS", b"TIMER_DELAY_SEC", b"TIMER_DELAY_MS"
OUT_MS, ROLL_TIMES = b"TIMER_OUT_MS", b"TIMER_ROLL_TIMES"
DEL_UNIQKEY, DEL_OFFSET = b"TIMER_DEL_UNIQKEY", b"TIMER_DEL_OFFSET"
ASKS = (DELAY_SEC, DELAY_MS, DELIVER_MS)           # in precedence order
DEFAULT_MAX_DELAY_SEC = 400 * 86_400               # timerMaxDelaySec: a year and a bit


def illegal(max_delay_ms: int) -> str:
    """5.x's remark for a timer it refuses (code 13, MESSAGE_ILLEGAL)."""
    return (f"timer message illegal, the delay time should not be bigger than the max delay {max_delay_ms}ms; "
            "or if set del msg, the delay time should be bigger than the current time")


def deliver_ms(props: bytes, now_ms: int, max_delay_ms: int) -> int | None:
    """When a message whose stored properties are ``props`` asks to be delivered (epoch ms), or
    None when it asks for no timer; ValueError with 5.x's remark when the value is not a whole
    number, or lies past the horizon.  A time already past is returned as it is (deliver now)."""
    for name in ASKS:
        value = message.property_value(props, name)
        if value is None:
            continue
        try:
            n = message.java_long(value)
        except ValueError:
            raise ValueError(illegal(max_delay_ms)) from None
        when = n if name == DELIVER_MS else now_ms + (n * 1000 if name == DELAY_SEC else n)
        if when - now_ms > max_delay_ms:
            raise ValueError(illegal(max_delay_ms))
        return when
    return None


def without_timer(props: bytes) -> bytes:
    """``props`` without the three timer asks (a ``DELAY`` level wins over them, as in 5.x)."""
    sep, nv = message.PROPERTY_SEP.encode(), message.NAME_VALUE_SEP.encode()
    return sep.join(p for p in props.split(sep) if p.split(nv, 1)[0] not in ASKS)


def timer_properties(props: bytes, when_ms: int, topic: str, queue_id: int) -> bytes:
    """A pending timer's stored properties: ``TIMER_OUT_MS``, ``REAL_TOPIC`` and ``REAL_QID`` set."""
    return message.with_properties(props, {OUT_MS: b"%d" % when_ms, b"REAL_TOPIC": topic.encode(),
                                           b"REAL_QID": b"%d" % queue_id})


def marker_properties(topic: str, msg_id: str, when_ms: int, offset: int) -> bytes:
    """A cancellation marker's properties (see the module's text)."""
    return message.with_properties(b"", {DEL_UNIQKEY: f"{topic}_{msg_id}".encode(), OUT_MS: b"%d" % when_ms,
                                         DEL_OFFSET: b"%d" % offset, b"WAIT": b"false"})


def tag_code(props: bytes, default: int) -> int:
    """A record in the timer queue: its entry's tag code (``TIMER_OUT_MS``, or a marker's
    ``-(offset + 1)``); ``default`` when it carries neither."""
    target = message.property_value(props, DEL_OFFSET)
    if target is not None and target.isdigit():
        return -(int(target) + 1)
    out = message.property_value(props, OUT_MS)
    return int(out) if out is not None and out.isdigit() else default


def rolled(props: bytes) -> bytes:
    """A timer's properties for its fresh copy (kept past retention): ``TIMER_ROLL_TIMES`` + 1."""
    times = message.property_value(props, ROLL_TIMES)
    n = int(times) + 1 if times is not None and times.isdigit() else 1
    return message.with_properties(props, {ROLL_TIMES: b"%d" % n})


def marker_record(topic: str, msg_id: str, when_ms: int, offset: int, now_ms: int, store_ip: bytes,
                  store_port: int) -> bytes:
    """A cancellation marker, ready for the writer: an empty body in the timer queue."""
    return message.encode_record(topic=TIMER_TOPIC_BYTES, queue_id=0, body=b"",
                                 properties=marker_properties(topic, msg_id, when_ms, offset), born_ts=now_ms,
                                 store_ip=store_ip, store_port=store_port)


def host_flags(store_ip: bytes) -> int:
    """A marker's sysflag (``marker_record`` sets the store host's width from its address)."""
    return message.STOREHOST_V6 if len(store_ip) == 16 else 0
