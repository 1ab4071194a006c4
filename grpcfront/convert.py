"""A 5.x message (``apache.rocketmq.v2.Message``) as a 4.x stored record's parts, as the 5.x proxy
converts one for a 4.x broker (``proxy:grpc/v2/common/GrpcConverter``): the tag as ``TAGS``, the
keys as ``KEYS`` (space-separated), the client's message id as ``UNIQ_KEY`` (what 4.x clients call
the msgId), a FIFO message group as ``__SHARDINGKEY``, a delay message's delivery time as
``TIMER_DELIVER_MS`` (a timer: ``store/timer.py``), the user properties as they are.  Sans-IO:
protobuf messages in, property maps and errors out.
"""
from __future__ import annotations

import gzip
import zlib

from rocketbox.store import message, timer

SHARDING_KEY = "__SHARDINGKEY"           # MessageConst.PROPERTY_SHARDING_KEY: a FIFO message's group
DELIVER_MS = timer.DELIVER_MS.decode()    # a delay message's delivery time (epoch ms): a 5.x timer
RESERVED = {message.PROP_TAGS, message.PROP_KEYS, message.PROP_UNIQ_KEY, SHARDING_KEY, DELIVER_MS}


class Refused(ValueError):
    """A message the front does not store: ``code`` (apache.rocketmq.v2.Code's name) and why."""

    def __init__(self, code: str, why: str):
        super().__init__(why)
        self.code = code


def body_of(m, max_size: int) -> bytes:
    """The message's body as stored: a GZIP- or ZLIB-encoded one (``body_encoding``) decoded first."""
    encoding = m.system_properties.body_encoding      # 0 unspecified, 1 IDENTITY, 2 GZIP (definition.proto)
    body = m.body
    if encoding == 2:
        try:
            body = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else zlib.decompress(body)
        except (OSError, zlib.error, EOFError) as e:
            raise Refused("MESSAGE_CORRUPTED", f"the message body is not GZIP-encoded as it says: {e}") from None
    if len(body) > max_size:
        raise Refused("MESSAGE_BODY_TOO_LARGE", f"the message body is {len(body)} bytes, more than {max_size}")
    return body


def properties_of(m) -> dict[str, str]:
    """The stored properties of a 5.x message (``WAIT`` true: the sender waits for the store)."""
    sp = m.system_properties
    bad = sorted(k for k in m.user_properties if k in RESERVED)
    if bad:
        raise Refused("ILLEGAL_MESSAGE_PROPERTY_KEY", f"the user property keys {bad} are reserved")
    props = dict(m.user_properties)
    if sp.HasField("tag") and sp.tag:
        if message.PROPERTY_SEP in sp.tag or message.NAME_VALUE_SEP in sp.tag:
            raise Refused("ILLEGAL_MESSAGE_TAG", "the tag holds a property separator")
        props[message.PROP_TAGS] = sp.tag
    if sp.keys:
        props[message.PROP_KEYS] = " ".join(sp.keys)
    if not sp.message_id:
        raise Refused("ILLEGAL_MESSAGE_ID", "the message has no message id")
    props[message.PROP_UNIQ_KEY] = sp.message_id
    if sp.HasField("message_group") and sp.message_group:
        props[SHARDING_KEY] = sp.message_group
    if sp.HasField("delivery_timestamp"):                 # a delay message: a timer, as 5.x's proxy sends it
        if sp.HasField("message_group") and sp.message_group:
            raise Refused("MESSAGE_PROPERTY_CONFLICT_WITH_TYPE", "a message has a delivery time or a message group, not both")
        t = sp.delivery_timestamp
        props[DELIVER_MS] = str(t.seconds * 1000 + t.nanos // 1_000_000)
    props[message.PROP_WAIT] = "true"
    return props
