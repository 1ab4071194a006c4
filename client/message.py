"""Messages as the client sees them: ``Message`` to send, ``MessageExt`` received (decoded from a
pull body of stored records, FACTS §4.3), ``SendResult``; client message ids (UNIQ_KEY, §4.7)."""
from __future__ import annotations

import datetime
import itertools
import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rocketbox.store import message as codec

if TYPE_CHECKING:
    from rocketbox.client.instance import MessageQueue

_counter = itertools.count()


def uniq_key(ip: bytes = b"\x7f\x00\x00\x01") -> str:
    """UNIQ_KEY: ip, pid (i16), class-loader hash (here: a per-process constant), ms since the start
    of this month, a counter (i16), as uppercase hex."""
    now = datetime.datetime.now()
    month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    ms = int((now - month).total_seconds() * 1000)
    return (ip + struct.pack(">hiih", os.getpid() & 0x7FFF, _LOADER, ms & 0x7FFFFFFF,
                             next(_counter) & 0x7FFF)).hex().upper()


_LOADER = int.from_bytes(os.urandom(4), "big") & 0x7FFFFFFF


@dataclass
class Message:
    """A message to send (Java's ``Message``): its topic and body, a tag (what consumers filter
    on), keys (what ``Admin.query`` and the IndexFile find it by), user properties, and when it is
    delivered: a delay level of the broker's ``messageDelayLevel`` (1-18), or a timer (5.x's
    ``setDeliverTimeMs`` / ``setDelayTimeMs``, which rocketbox serves at ms precision)."""
    topic: str
    body: bytes
    tags: str | None = None
    keys: str | list[str] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    delay_level: int = 0
    deliver_time_ms: int = 0          # a timer (5.x's setDeliverTimeMs): delivered at this epoch ms
    delay_ms: int = 0                 # a timer (5.x's setDelayTimeMs): delivered this long after the send

    def wire_properties(self) -> dict[str, str]:
        """The properties as they are sent: the user's, then TAGS, KEYS, DELAY, the timer's, and a
        new UNIQ_KEY (the msgId) unless one is set."""
        props = dict(self.properties)
        if self.tags:
            props["TAGS"] = self.tags
        if self.keys:
            props["KEYS"] = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
        if self.delay_level:
            props["DELAY"] = str(self.delay_level)
        if self.deliver_time_ms:
            props["TIMER_DELIVER_MS"] = str(self.deliver_time_ms)
        if self.delay_ms:
            props["TIMER_DELAY_MS"] = str(self.delay_ms)
        props.setdefault("UNIQ_KEY", uniq_key())
        return props


@dataclass
class MessageExt:
    """A message received (Java's ``MessageExt``): what was sent, and where and when it is stored."""
    topic: str
    body: bytes
    properties: dict[str, str]
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    offset_msg_id: str
    born_timestamp: int
    store_timestamp: int
    reconsume_times: int
    flag: int
    broker_name: str = ""

    @property
    def tags(self) -> str | None:
        """The message's tag, if it has one."""
        return self.properties.get("TAGS")

    @property
    def keys(self) -> list[str]:
        """The message's keys."""
        return (self.properties.get("KEYS") or "").split()

    @property
    def msg_id(self) -> str:
        """The id the producer gave it (UNIQ_KEY), else the store's (offsetMsgId)."""
        return self.properties.get("UNIQ_KEY") or self.offset_msg_id


def decode_messages(body: bytes, broker_name: str = "") -> list[MessageExt]:
    """A pull body's records as messages: fields straight into each MessageExt, and each store
    host's msgId prefix made once (a pull's records share one)."""
    out: list[MessageExt] = []
    ids: dict[tuple[object, int], codec.MsgIds] = {}
    for h, payload, topic, props in codec.record_fields(body, "pull body"):
        (_total, _magic, _crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, _born_ip, _born_port,
         store_ts, store_ip, store_port, reconsume_times, _prepared, _body_len) = h
        msg_ids = ids.get((store_ip, store_port))
        if msg_ids is None:
            msg_ids = ids[(store_ip, store_port)] = codec.MsgIds(store_ip, store_port)
        if sys_flag & codec.COMPRESSED:
            payload = zlib.decompress(payload)
        out.append(MessageExt(topic.decode("utf-8", "replace"), payload,
                              codec.parse_properties(props.decode("utf-8", "replace")), queue_id, queue_offset, phys,
                              msg_ids(phys), born_ts, store_ts, reconsume_times, flag, broker_name))
    return out


@dataclass
class SendResult:
    """What a broker answered a stored send: the status, the message's ids, its queue and offset."""
    status: str                 # SEND_OK, FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE
    msg_id: str                 # UNIQ_KEY (comma-joined for a batch)
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
