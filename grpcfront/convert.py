"""A 5.x message (``apache.rocketmq.v2.Message``) as a 4.x stored record's parts, as the 5.x proxy
converts one for a 4.x broker (``proxy:grpc/v2/common/GrpcConverter``): the tag as ``TAGS``, the
keys as ``KEYS`` (space-separated), the client's message id as ``UNIQ_KEY`` (what 4.x clients call
the msgId), a FIFO message group as ``__SHARDINGKEY``, a delay message's delivery time as
``TIMER_DELIVER_MS`` (a timer: ``store/timer.py``), the user properties as they are; and a stored
4.x record as the 5.x message a consumer receives (``message_of``), as the proxy builds one from a
``MessageExt``: the system properties (``SYSTEM``) out of the user properties.  Sans-IO: protobuf
messages in and out, property maps and errors.
"""
from __future__ import annotations

import gzip
import socket
import zlib

from rocketbox.store import message, timer

SHARDING_KEY = "__SHARDINGKEY"           # MessageConst.PROPERTY_SHARDING_KEY: a FIFO message's group
DELIVER_MS = timer.DELIVER_MS.decode()    # a delay message's delivery time (epoch ms): a 5.x timer
RESERVED = {message.PROP_TAGS, message.PROP_KEYS, message.PROP_UNIQ_KEY, SHARDING_KEY, DELIVER_MS}
# MessageConst.STRING_HASH_SET (4.9.8's), and the 5.x timer's and FIFO's keys: a 4.x record's system
# properties, which a 5.x consumer gets as fields of the message or not at all, never as user properties
SYSTEM = frozenset("""ARRIVE_TIME BUYER_ID CLUSTER CONSUME_START_TIME CORRECTION_FLAG CORRELATION_ID DELAY
    INNER_MULTI_QUEUE_OFFSET INSTANCE_ID KEYS MAX_OFFSET MAX_RECONSUME_TIMES MIN_OFFSET MQ2_FLAG MSG_REGION MSG_TYPE
    ORIGIN_MESSAGE_ID PGROUP PUSH_REPLY_TIME REAL_QID REAL_TOPIC RECONSUME_TIME REPLY_TO_CLIENT RETRY_TOPIC TAGS
    TRACE_ON TRANSFER_FLAG TRAN_MSG TTL UNIQ_KEY WAIT""".split()) | {SHARDING_KEY} | {
    k.decode() for k in (timer.DELIVER_MS, timer.DELAY_SEC, timer.DELAY_MS, timer.OUT_MS, timer.ROLL_TIMES,
                         timer.DEL_UNIQKEY, timer.DEL_OFFSET)}


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


def _host(ip: bytes, port: int) -> str:
    return f"{socket.inet_ntop(socket.AF_INET6 if len(ip) == 16 else socket.AF_INET, ip)}:{port}"


def message_of(proto, head: message.Header, body: bytes, topic: bytes, props: bytes, *, receipt_handle: str,
               attempt: int, invisible_ms: int):
    """A stored 4.x record as the ``apache.rocketmq.v2.Message`` a 5.x consumer receives: the
    body as stored (a 4.x client's compressed one inflated: IDENTITY), its CRC32 digest, the
    message id (``UNIQ_KEY``, else the record's offset message id), tag, keys, message group, the
    type (FIFO with a group, DELAY with a timer's time, TRANSACTION from a transaction), times and
    hosts, the queue and offset, and this delivery's receipt handle, attempt and invisible time."""
    m = proto.Message()
    m.topic.name = topic.decode("utf-8", "replace")
    if head.sys_flag & message.COMPRESSED:
        try:
            body = zlib.decompress(body)
        except zlib.error:          # (flagged so, but not zlib: received as stored, not a receive that fails forever)
            pass
    m.body = body
    fields = message.parse_properties(props.decode("utf-8", "replace"))
    for k, v in fields.items():
        if k not in SYSTEM:
            m.user_properties[k] = v
    sp = m.system_properties
    if fields.get(message.PROP_TAGS):
        sp.tag = fields[message.PROP_TAGS]
    if fields.get(message.PROP_KEYS):
        sp.keys.extend(k for k in fields[message.PROP_KEYS].split(" ") if k)
    sp.message_id = fields.get(message.PROP_UNIQ_KEY) or message.offset_msg_id(head.store_ip, head.store_port, head.phys_offset)
    sp.body_digest.type = proto.enum("DigestType", "CRC32")
    sp.body_digest.checksum = "%08X" % (zlib.crc32(body) & 0xFFFFFFFF)
    sp.body_encoding = proto.enum("Encoding", "IDENTITY")
    group, deliver = fields.get(SHARDING_KEY), fields.get(DELIVER_MS)
    kind = "FIFO" if group else "DELAY" if deliver or fields.get("DELAY") else \
        "TRANSACTION" if fields.get("TRAN_MSG") == "true" else "NORMAL"
    sp.message_type = proto.enum("MessageType", kind)
    if group:
        sp.message_group = group
    if deliver and deliver.isdigit():
        sp.delivery_timestamp.FromMilliseconds(int(deliver))
    sp.born_timestamp.FromMilliseconds(head.born_ts)
    sp.born_host = _host(head.born_ip, head.born_port)
    sp.store_timestamp.FromMilliseconds(head.store_ts)
    sp.store_host = _host(head.store_ip, head.store_port)
    sp.queue_id, sp.queue_offset = head.queue_id, head.queue_offset
    sp.receipt_handle = receipt_handle
    sp.delivery_attempt = attempt
    sp.invisible_duration.FromMilliseconds(invisible_ms)
    return m
