"""CommitLog record codec ("v1", magic 0xDAA320A7) — FACTS §4.

Every role that touches record bytes uses this module: the producer side encodes a record with
placeholders (queue offset, physical offset, store timestamp), the writer patches those three
fields in place (``QUEUE_OFFSET_AT``, ``PHYS_OFFSET_AT``, ``store_ts_at``), and the dispatcher,
readers, recovery and Spark decode with ``decode_record``/``check_record``.

Stored record (IPv4 hosts; each V6 host field grows by 12 bytes):

    off  size  field
    0    4     TOTALSIZE          whole record incl. this field
    4    4     MAGICCODE          0xDAA320A7
    8    4     BODYCRC            zlib.crc32(body) & 0x7FFFFFFF
    12   4     QUEUEID
    16   4     FLAG               user flag
    20   8     QUEUEOFFSET        consume-queue index (0 for prepared/rollback tx)
    28   8     PHYSICALOFFSET     commit-log offset of this record
    36   4     SYSFLAG            MessageSysFlag
    40   8     BORNTIMESTAMP      ms
    48   8/20  BORNHOST           ip(4/16) + port i32
    56   8     STORETIMESTAMP     ms, set by the writer
    64   8/20  STOREHOST          ip(4/16) + port i32
    72   4     RECONSUMETIMES
    76   8     PREPARED TX OFFSET
    84   4+B   BODYLEN + BODY
    88+B 1+T   TOPICLEN (1 byte) + TOPIC
    ..   2+P   PROPLEN (i16) + PROPERTIES

Pure: no I/O.  Integers big-endian.
"""
from __future__ import annotations

import functools
import ipaddress
import re
import struct
from dataclasses import dataclass, fields
from typing import NamedTuple

from isal.isal_zlib import crc32  # zlib's CRC-32, with PCLMULQDQ: ~55 ns a KiB against zlib's ~310

from rocketbox.native import compiled
from rocketbox.remoting.codes import ResponseCode
from rocketbox.store.errors import CorruptData, MessageRejected

MAGIC = -626843481          # 0xDAA320A7, MESSAGE_MAGIC_CODE (v1)
MAGIC_V2 = -626843477       # 0xDAA320AB, 5.x two-byte topic length; recognised, never written
BLANK_MAGIC = -875286124    # 0xCBD43194, end-of-file filler
END_FILE_MIN_BLANK = 8      # [i32 remaining][i32 BLANK_MAGIC]
HEAD = struct.Struct(">ii")  # a record's TOTALSIZE and MAGIC; a BLANK filler's remaining bytes and BLANK_MAGIC
BLANK = HEAD

# MessageSysFlag (FACTS §4.4)
COMPRESSED = 0x1
MULTI_TAGS = 0x2
TX_MASK = 0xC
TX_NOT, TX_PREPARED, TX_COMMIT, TX_ROLLBACK = 0x0, 0x4, 0x8, 0xC
BORNHOST_V6 = 0x10
STOREHOST_V6 = 0x20

# property separators and well-known keys (FACTS §4.1)
NAME_VALUE_SEP = "\x01"
PROPERTY_SEP = "\x02"
PROP_TAGS, PROP_KEYS, PROP_UNIQ_KEY, PROP_DELAY, PROP_WAIT = "TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT"

# response codes used when a message is refused (FACTS §2.2): remoting/codes.py's table
SYSTEM_ERROR, MESSAGE_ILLEGAL = int(ResponseCode.SYSTEM_ERROR), int(ResponseCode.MESSAGE_ILLEGAL)

TOPIC_MAX_LEN = 127
PROPERTIES_MAX_LEN = 32767
RECORD_SLACK = 64 * 1024     # 4.9.4+: whole record may exceed maxMessageSize by this much
_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")


class Header(NamedTuple):
    """A record's fixed header (FACTS §4.1), declared once, field by field (a parsed one reads by
    name).  ``FORMATS`` gives each field's big-endian format in this order, a host's address 4
    bytes (IPv4) or 16 (IPv6, by the sysflag's BORNHOST_V6 / STOREHOST_V6); every offset, struct
    and header size below is derived from the two.  (BODY, then TOPICLEN u8 + TOPIC, then
    PROPERTIESLENGTH i16 + PROPERTIES follow it.)"""
    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    phys_offset: int
    sys_flag: int
    born_ts: int
    born_ip: bytes
    born_port: int
    store_ts: int
    store_ip: bytes
    store_port: int
    reconsume_times: int
    prepared_offset: int
    body_len: int


FORMATS = ("i", "i", "i", "i", "i", "q", "q", "i", "q", "host", "i", "q", "host", "i", "i", "q", "i")
assert len(FORMATS) == len(Header._fields)
FIELDS = tuple(zip(Header._fields, FORMATS))       # (name, format) of each field, in order


def _formats(born_v6: bool, store_v6: bool) -> list[str]:
    hosts = {"born_ip": "16s" if born_v6 else "4s", "store_ip": "16s" if store_v6 else "4s"}
    return [hosts.get(name, fmt) for name, fmt in FIELDS]


def _header_struct(born_v6: bool, store_v6: bool) -> struct.Struct:
    return struct.Struct(">" + "".join(_formats(born_v6, store_v6)))


def _offsets(born_v6: bool = False, store_v6: bool = False) -> dict[str, int]:
    """Each field's byte offset in a header of these host widths."""
    out, at = {}, 0
    for (name, _fmt), fmt in zip(FIELDS, _formats(born_v6, store_v6)):
        out[name] = at
        at += struct.calcsize(">" + fmt)
    return out


AT = _offsets()              # IPv4 hosts; the fields before BORNHOST are where they are with any host
# The fixed prefix every record shares, up to and including SYSFLAG.
PREFIX = struct.Struct(">" + "".join(fmt for _name, fmt in FIELDS[:8]))
MAGIC_AT, BODY_CRC_AT, QUEUE_ID_AT, FLAG_AT = AT["magic"], AT["body_crc"], AT["queue_id"], AT["flag"]
QUEUE_OFFSET_AT, PHYS_OFFSET_AT, SYSFLAG_AT = AT["queue_offset"], AT["phys_offset"], AT["sys_flag"]
BORN_TS_AT, BORN_HOST_AT = AT["born_ts"], AT["born_ip"]
assert PREFIX.size == BORN_TS_AT == 40

# HEADERS[sysflag & 0x30 >> 4]: the full fixed header through BODYLEN, for each host-width mix.
HEADERS = tuple(_header_struct(bool(i & 1), bool(i & 2)) for i in range(4))
MIN_RECORD_SIZE = HEADERS[0].size + 1 + 2       # IPv4 hosts, empty body, topic and properties
HEADER_V4_SIZE = HEADERS[0].size                # through BODYLEN, both hosts IPv4
HOST_V6_EXTRA = HEADERS[1].size - HEADERS[0].size   # what an IPv6 host adds to the header (12)
STORE_TS_AT = AT["store_ts"]                    # with an IPv4 born host (the store host comes after it)
# with both hosts IPv4 (a wider host moves them: ``header_for``, ``store_ts_at``)
STORE_HOST_AT, RECONSUME_AT, BODY_LEN_AT = AT["store_ip"], AT["reconsume_times"], AT["body_len"]
assert (HEADER_V4_SIZE, HOST_V6_EXTRA, STORE_TS_AT, BODY_LEN_AT) == (88, 12, 56, 84)


def header_for(sys_flag: int) -> struct.Struct:
    return HEADERS[(sys_flag >> 4) & 3]


def store_ts_at(sys_flag: int) -> int:
    """Byte offset of STORETIMESTAMP inside a record with this sysflag."""
    return STORE_TS_AT + (HOST_V6_EXTRA if sys_flag & BORNHOST_V6 else 0)


def store_ts_of(buf, at: int) -> int:
    """The STORETIMESTAMP of the record at ``at`` of ``buf``."""
    sys_flag = struct.unpack_from(">i", buf, at + SYSFLAG_AT)[0]
    return struct.unpack_from(">q", buf, at + store_ts_at(sys_flag))[0]


# RECORD_SHAPES[(sysflag >> 4) & 3]: (STORETIMESTAMP's offset, header size), as HEADERS is indexed
# (a table for the record-by-record loops of the writer and the dispatcher)
RECORD_SHAPES = tuple((store_ts_at(w << 4), HEADERS[w].size) for w in range(4))


def record_size(body_len: int, topic_len: int, props_len: int, sys_flag: int = 0) -> int:
    return header_for(sys_flag).size + body_len + 1 + topic_len + 2 + props_len


BODY_CRC_MASK = 0x7FFFFFFF       # UtilAll.crc32: the CRC32 as a non-negative Java int


def body_crc(body) -> int:
    return crc32(body) & BODY_CRC_MASK


# ---------------------------------------------------------------- properties string

def java_long(value: bytes | str, bits: int = 64) -> int:
    """``value`` read as Java's ``Long.parseLong`` (``bits`` 32: ``Integer.parseInt``) reads it:
    an optional ``+`` or ``-``, then decimal digits only (any script's, as ``Character.digit``),
    within range; no spaces, no ``_``, nothing else (ValueError).  (5.x parses the timer
    properties so, 4.9.8 the DELAY level.)"""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isdecimal():
        raise ValueError(f"For input string: {text!r}")
    n = int(text)
    if not -2**(bits - 1) <= n < 2**(bits - 1):
        raise ValueError(f"For input string: {text!r}")
    return n


def encode_properties(props: dict[str, str]) -> str:
    """``k1\\x01v1\\x02k2\\x01v2`` (4.9.4+: no trailing separator); None values skipped."""
    return PROPERTY_SEP.join(f"{k}{NAME_VALUE_SEP}{v}" for k, v in props.items() if v is not None)


def parse_properties(s: str) -> dict[str, str]:
    """Accepts both the 4.9.4+ and the older trailing-separator form; drops empty keys/values."""
    out: dict[str, str] = {}
    for seg in s.split(PROPERTY_SEP):
        name, _sep, value = seg.partition(NAME_VALUE_SEP)
        if name and value:          # a pair without the separator has no value
            out[name] = value
    return out


def property_value(props: bytes, key: bytes) -> bytes | None:
    """One property straight from the stored bytes, without building a dict (dispatcher hot path)."""
    needle = key + b"\x01"
    i = 0
    while True:
        i = props.find(needle, i)
        if i < 0:
            return None
        if i == 0 or props[i - 1] == 2:
            start = i + len(needle)
            end = props.find(b"\x02", start)
            return props[start:] if end < 0 else props[start:end]
        i += 1


def with_properties(props: bytes, updates: dict[bytes, bytes], only_if_absent: frozenset[bytes] = frozenset()) -> bytes:
    """``props`` (``k\\x01v\\x02...``, as stored) with ``updates`` set, as Java's putProperty sets
    them: a key already there keeps its place (and its value, if it is in ``only_if_absent``), a
    new one goes at the end."""
    nv, sep = NAME_VALUE_SEP.encode(), PROPERTY_SEP.encode()
    pairs = [p.split(nv, 1) for p in props.split(sep) if p]
    seen = set()
    for kv in pairs:
        key = kv[0]
        if key in updates:
            seen.add(key)
            if key not in only_if_absent:
                kv[1:] = [updates[key]]
    pairs += [[k, v] for k, v in updates.items() if k not in seen]
    return sep.join(nv.join(kv) for kv in pairs)


def record_again(head: "Header", body: bytes, props: bytes, *, topic: bytes, queue_id: int,
                 reconsume_times: int | None = None) -> bytes:
    """A stored record (``record_fields``' Header, body, properties) stored again under
    ``topic`` and ``queue_id``: flag, sysflag, born time and host, store host and prepared offset
    as they were (queue and physical offsets and store time for the writer to fill), its
    reconsume count ``reconsume_times`` or as it was."""
    f = head
    return encode_record(topic=topic, queue_id=queue_id, body=body, properties=props, flag=f.flag, sys_flag=f.sys_flag,
                         born_ts=f.born_ts, born_ip=f.born_ip, born_port=f.born_port, store_ip=f.store_ip,
                         store_port=f.store_port,
                         reconsume_times=f.reconsume_times if reconsume_times is None else reconsume_times,
                         prepared_offset=f.prepared_offset)


_BATCH_HEAD = struct.Struct(">iiiii")        # totalSize, magic (0), bodyCRC (0), flag, bodyLen


def batch_properties(batch: bytes):
    """Each message's properties (bytes) in a SEND_BATCH_MESSAGE body, for checks off the hot
    path; it stops where the body stops parsing (``encode_batch_records`` names what is wrong)."""
    at, n, hsize = 0, len(batch), _BATCH_HEAD.size
    while at + hsize + 2 <= n:
        blen = _BATCH_HEAD.unpack_from(batch, at)[4]
        end_body = at + hsize + blen
        if blen < 0 or end_body + 2 > n:
            return
        (plen,) = _I16.unpack_from(batch, end_body)
        end = end_body + 2 + plen
        if plen < 0 or end > n:
            return
        yield batch[end_body + 2:end]
        at = end

def encode_client_batch(messages: list[tuple[int, bytes, str]]) -> bytes:
    """A SEND_BATCH_MESSAGE body (FACTS §4.2), the client side of ``encode_batch_records``:
    [(flag, body, properties string)] -> batch body."""
    out = []
    for flag, body, props in messages:
        p = props.encode()
        out += [_BATCH_HEAD.pack(_BATCH_HEAD.size + 2 + len(body) + len(p), 0, 0, flag, len(body)), body,
                struct.pack(">h", len(p)), p]
    return b"".join(out)


# ---------------------------------------------------------------- validation

def check_topic(topic: str) -> None:
    """RocketMQ's TopicValidator: blank, illegal characters or > 127 chars is SYSTEM_ERROR."""
    if not topic or not topic.strip():
        raise MessageRejected(SYSTEM_ERROR, "the specified topic is blank")
    if len(topic) > TOPIC_MAX_LEN:
        raise MessageRejected(SYSTEM_ERROR, f"the specified topic is longer than topic max length {TOPIC_MAX_LEN}.")
    if not _TOPIC_RE.match(topic):
        raise MessageRejected(SYSTEM_ERROR, f"the specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$")


def check_sizes(body_len: int, props_len: int, max_message_size: int) -> None:
    if props_len > PROPERTIES_MAX_LEN:
        raise MessageRejected(MESSAGE_ILLEGAL, f"message properties length too long {props_len} > {PROPERTIES_MAX_LEN}")
    if body_len > max_message_size:
        raise MessageRejected(MESSAGE_ILLEGAL, f"message body size exceeded, body {body_len} > maxMessageSize {max_message_size}")


# ---------------------------------------------------------------- hosts and ids

@functools.lru_cache(maxsize=4096)
def pack_host(host: tuple[str, int]) -> tuple[bytes, int, bool]:
    """('10.0.0.1', 10911) -> (ip bytes, port, is_v6).  Cached: a reader packs its clients'
    addresses once per message, and they are few."""
    ip = ipaddress.ip_address(host[0])
    return ip.packed, host[1], ip.version == 6


def offset_msg_id(store_ip: bytes, store_port: int, phys_offset: int) -> str:
    """offsetMsgId (FACTS §4.6): uppercase hex of store ip ‖ port i32 ‖ commit-log offset i64."""
    return MsgIds(store_ip, store_port)(phys_offset)


class MsgIds:
    """``offset_msg_id`` for one store host, its ip and port turned to hex once."""

    def __init__(self, store_ip: bytes, store_port: int):
        self.prefix = (store_ip + struct.pack(">i", store_port)).hex().upper()
        self.ascii_format = self.prefix.encode() + b"%016X"

    def ascii_of(self, phys_offset: int) -> bytes:
        """The msgId of a record at a (non-negative) offset, as ASCII bytes."""
        return self.ascii_format % phys_offset

    def __call__(self, phys_offset: int) -> str:
        return "%s%016X" % (self.prefix, phys_offset & 0xFFFFFFFFFFFFFFFF)

    def join(self, phys_offsets: list[int]) -> str:
        """``",".join(map(self, phys_offsets))`` (a batch's msgId), every offset turned to hex at once."""
        return self.prefix + struct.pack(f">{len(phys_offsets)}q", *phys_offsets).hex(",", 8).upper().replace(
            ",", "," + self.prefix)


def parse_offset_msg_id(msg_id: str) -> tuple[bytes, int, int]:
    raw = bytes.fromhex(msg_id)
    if len(raw) not in (16, 28):
        raise ValueError(f"offsetMsgId must be 32 or 56 hex chars, got {len(msg_id)}")
    ip_len = len(raw) - 12
    port, phys = struct.unpack_from(">iq", raw, ip_len)
    return raw[:ip_len], port, phys


# ---------------------------------------------------------------- encode

def encode_record(*, topic: bytes, queue_id: int, body: bytes, properties: bytes, flag: int = 0,
                  sys_flag: int = 0, born_ts: int = 0, born_ip: bytes = b"\0\0\0\0", born_port: int = 0,
                  store_ip: bytes = b"\0\0\0\0", store_port: int = 0, reconsume_times: int = 0,
                  prepared_offset: int = 0, queue_offset: int = 0, phys_offset: int = 0,
                  store_ts: int = 0) -> bytes:
    """One complete stored record.  Host-width bits of ``sys_flag`` are set from the ip lengths."""
    sys_flag &= ~(BORNHOST_V6 | STOREHOST_V6)
    if len(born_ip) == 16:
        sys_flag |= BORNHOST_V6
    if len(store_ip) == 16:
        sys_flag |= STOREHOST_V6
    hdr = header_for(sys_flag)
    total = hdr.size + len(body) + 1 + len(topic) + 2 + len(properties)
    return b"".join((
        hdr.pack(total, MAGIC, body_crc(body), queue_id, flag, queue_offset, phys_offset, sys_flag,
                 born_ts, born_ip, born_port, store_ts, store_ip, store_port, reconsume_times,
                 prepared_offset, len(body)),
        body, bytes((len(topic),)), topic, struct.pack(">h", len(properties)), properties))


class Records(NamedTuple):
    """Stored records ready for a slab: each one's size, and the pieces (bytes-likes) whose
    concatenation is all of them, so a slab joins every record of a loop turn in one copy."""
    sizes: list[int]
    parts: list


_I16 = struct.Struct(">h")
_SEP = PROPERTY_SEP.encode()


class RecordTemplate:
    """What the records of one topic, queue, producer host and sysflag share, packed once: every
    header field but TOTALSIZE, BODYCRC, FLAG, BORNTIMESTAMP and BODYLEN, and the topic.  A record
    then costs two packs and a CRC.  ``common``: ``encode_record``'s keywords but ``born_ts``."""

    def __init__(self, topic: bytes, queue_id: int, **common):
        first = encode_record(topic=topic, queue_id=queue_id, body=b"", properties=b"", **common)
        hsize = len(first) - 3 - len(topic)
        lead, rest = first[QUEUE_OFFSET_AT:BORN_TS_AT], first[BORN_HOST_AT:hsize - 4]   # QUEUEOFFSET..SYSFLAG, BORNHOST..PREPARED
        self.queue_id, self.fixed = queue_id, hsize + 3 + len(topic)
        self.head = struct.Struct(f">iiiii{len(lead)}sq{len(rest)}si")   # ... FLAG, lead, BORNTIMESTAMP, rest, BODYLEN
        self.tail = struct.Struct(f">B{len(topic)}sh")                    # topic, PROPERTIESLENGTH
        self.lead, self.rest, self.topic = lead, rest, topic

    def add(self, out: Records, born_ts: int, body, props, flag: int, more=b"") -> None:
        """One record: ``props`` then ``more`` are its properties (pieces, not joined here)."""
        plen = len(props) + len(more)
        size = self.fixed + len(body) + plen
        out.sizes.append(size)
        out.parts.extend((self.head.pack(size, MAGIC, body_crc(body), self.queue_id, flag, self.lead, born_ts,
                                         self.rest, len(body)),
                          body, self.tail.pack(len(self.topic), self.topic, plen), props, more))


def _compiled_batch_records(batch: bytes, batch_props: bytes, max_body: int, t: RecordTemplate,
                            born_ts: int) -> Records:
    """``py_encode_batch_records`` by the compiled ``batch_records`` (one piece, all the records),
    which takes a batch that parses and whose sizes RocketMQ accepts; the twin reads any other."""
    got = _batch_records(batch, batch_props, _SEP + batch_props, max_body, PROPERTIES_MAX_LEN, t.lead, t.rest,
                         t.topic, t.queue_id, born_ts, t.fixed, crc32)
    if got is None:
        return py_encode_batch_records(batch, batch_props, max_body, t, born_ts)
    return Records(got[0], [got[1]])


def py_encode_batch_records(batch: bytes, batch_props: bytes, max_body: int, t: RecordTemplate,
                            born_ts: int) -> Records:
    """The stored records of a SEND_BATCH_MESSAGE body (FACTS §4.2), in one pass: each message's
    flag, body and properties, then a separator unless they end with one, then ``batch_props``
    (the request's properties and CLUSTER), as RocketMQ's MessageExtBatchEncoder does.  Bodies
    and properties are views of ``batch``, copied once, into the slab.  Anything that does not
    parse, or sizes RocketMQ refuses, is MESSAGE_ILLEGAL naming where."""
    out = Records([], [])
    view, at, n, bodies = memoryview(batch), 0, len(batch), 0
    head, plen_at, hsize = _BATCH_HEAD.unpack_from, _I16.unpack_from, _BATCH_HEAD.size
    with_sep, plain = _SEP + batch_props, batch_props
    # RecordTemplate.add, inlined with its fields in locals: the calls cost more than the packing
    add_size, add_parts = out.sizes.append, out.parts.extend
    pack_head, pack_tail, fixed = t.head.pack, t.tail.pack, t.fixed
    queue_id, lead, rest, topic, topic_len = t.queue_id, t.lead, t.rest, t.topic, len(t.topic)
    while at < n:
        if at + hsize + 2 > n:
            raise MessageRejected(MESSAGE_ILLEGAL, f"batch body truncated at byte {at}")
        total, _magic, _crc, flag, blen = head(batch, at)
        end_body = at + hsize + blen
        if blen < 0 or end_body + 2 > n:
            raise MessageRejected(MESSAGE_ILLEGAL, f"batch message {len(out.sizes)}: body length {blen} runs past the batch")
        (plen,) = plen_at(batch, end_body)
        end = end_body + 2 + plen
        if plen < 0 or end > n or total != end - at:
            raise MessageRejected(MESSAGE_ILLEGAL, f"batch message {len(out.sizes)}: sizes do not add up (totalSize {total})")
        more = (plain if batch[end - 1] == 2 else with_sep) if plen and batch_props else plain
        props_len = plen + len(more)
        if props_len > PROPERTIES_MAX_LEN or blen > max_body:
            check_sizes(blen, props_len, max_body)
        bodies += blen
        body, size = view[at + hsize:end_body], fixed + blen + props_len
        add_size(size)
        add_parts((pack_head(size, MAGIC, crc32(body) & BODY_CRC_MASK, queue_id, flag, lead, born_ts, rest, blen),
                   body, pack_tail(topic_len, topic, props_len), view[end_body + 2:end], more))
        at = end
    if not out.sizes:
        raise MessageRejected(MESSAGE_ILLEGAL, "empty batch")
    if bodies > max_body:
        raise MessageRejected(MESSAGE_ILLEGAL, f"batch body size exceeded maxMessageSize {max_body}")
    return out


if compiled is not None:
    _batch_records = compiled.batch_records
    encode_batch_records = _compiled_batch_records
else:
    encode_batch_records = py_encode_batch_records


# ---------------------------------------------------------------- decode

@dataclass(frozen=True)
class Record:
    """A decoded stored record (copies; for tests, tools and slow paths)."""
    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    phys_offset: int
    sys_flag: int
    born_ts: int
    born_ip: bytes
    born_port: int
    store_ts: int
    store_ip: bytes
    store_port: int
    reconsume_times: int
    prepared_offset: int
    body: bytes
    topic: str
    properties: dict

    @property
    def tx_type(self) -> int:
        return self.sys_flag & TX_MASK

    @property
    def msg_id(self) -> str:
        return offset_msg_id(self.store_ip, self.store_port, self.phys_offset)


# a Record is a Header but BODYLEN, then the decoded body, topic and properties
assert tuple(f.name for f in fields(Record))[:len(Header._fields) - 1] == Header._fields[:-1]


_BODY_CRC, _BODY_LEN = Header._fields.index("body_crc"), Header._fields.index("body_len")   # (a raw header's)


def _fields(buf, pos: int, where: str):
    """Parse one record at ``pos`` into (header tuple, body, topic, props); raises CorruptData."""
    n = len(buf)
    if pos + PREFIX.size > n:
        raise CorruptData(where, pos, "record header runs past the end of the data")
    total, magic = struct.unpack_from(">ii", buf, pos)
    if magic != MAGIC:
        raise CorruptData(where, pos, f"bad magic code {magic & 0xFFFFFFFF:#010x}")
    sys_flag = struct.unpack_from(">i", buf, pos + SYSFLAG_AT)[0]
    hdr = header_for(sys_flag)
    if total < hdr.size + 3 or pos + total > n:
        raise CorruptData(where, pos, f"record size {total} does not fit the data")
    h = hdr.unpack_from(buf, pos)
    body_len = h[_BODY_LEN]
    body_at = pos + hdr.size
    topic_at = body_at + body_len
    if body_len < 0 or topic_at + 1 > pos + total:
        raise CorruptData(where, pos, f"body length {body_len} does not fit record size {total}")
    topic_len = buf[topic_at]
    props_at = topic_at + 1 + topic_len
    if props_at + 2 > pos + total:
        raise CorruptData(where, pos, "topic runs past the record")
    props_len = struct.unpack_from(">h", buf, props_at)[0]
    if props_len < 0 or hdr.size + body_len + 1 + topic_len + 2 + props_len != total:
        raise CorruptData(where, pos, f"field lengths do not add up to record size {total}")
    return (h, bytes(buf[body_at:topic_at]), bytes(buf[topic_at + 1:props_at]),
            bytes(buf[props_at + 2:props_at + 2 + props_len]))


def properties_at(buf, pos: int = 0) -> bytes:
    """The properties of the whole record at ``pos`` of ``buf`` (a pull's filter reads nothing
    else of it); ValueError when the record's lengths do not hold together."""
    sys_flag = struct.unpack_from(">i", buf, pos + SYSFLAG_AT)[0]
    hdr = header_for(sys_flag)
    body_len = struct.unpack_from(">i", buf, pos + hdr.size - 4)[0]      # BODYLEN: the header's last field
    topic_at = pos + hdr.size + body_len
    props_at = topic_at + 1 + buf[topic_at]
    n = struct.unpack_from(">h", buf, props_at)[0]
    if body_len < 0 or n < 0 or props_at + 2 + n > len(buf):
        raise ValueError(f"record at {pos}: its lengths do not fit its {len(buf) - pos} bytes")
    return bytes(buf[props_at + 2:props_at + 2 + n])


def decode_record(buf, pos: int = 0, where: str = "record") -> Record:
    """Text as Java's ``new String(bytes, UTF_8)`` reads it (MessageDecoder): bytes that are not
    UTF-8 become U+FFFD.  A batch's properties are stored as the client sent them, by RocketMQ's
    broker as by ours, so a store may hold such bytes; they are not a broken record."""
    h, body, topic, props = _fields(buf, pos, where)
    return Record(*h[:_BODY_LEN], body, topic.decode("utf-8", "replace"),  # type: ignore[call-arg]  # the header but BODYLEN
                  parse_properties(props.decode("utf-8", "replace")))


def decode_records(buf, where: str = "records") -> list[Record]:
    """Every record of ``buf``, whole records back to back (a pull body)."""
    return [Record(*h[:_BODY_LEN], body, topic.decode("utf-8", "replace"),  # type: ignore[call-arg]  # but BODYLEN
                   parse_properties(props.decode("utf-8", "replace")))
            for h, body, topic, props in record_fields(buf, where)]


def record_fields(buf, where: str = "records"):
    """(``Header``, body, topic, properties) of every record of ``buf``, whole records back to
    back, each checked as ``decode_record`` checks it (CorruptData naming ``where``)."""
    at, n = 0, len(buf)
    while at < n:
        h, body, topic, props = _fields(buf, at, where)
        header = Header._make(h)
        yield header, body, topic, props
        at += header.total_size


_I32 = struct.Struct(">i")


def check_record(buf, pos: int, check_crc: bool = True, where: str = "commitlog"):
    """Recovery's ``checkMessageAndReturnSize``: returns the record size, 0 for a BLANK filler,
    or raises CorruptData.  An all-zero header (never written) is CorruptData too."""
    if pos + 8 > len(buf):
        raise CorruptData(where, pos, "no room for a record header")
    total, magic = struct.unpack_from(">ii", buf, pos)
    if magic == BLANK_MAGIC:
        return 0
    h, body, _topic, _props = _fields(buf, pos, where)
    if check_crc and body_crc(body) != h[_BODY_CRC]:
        raise CorruptData(where, pos, f"body CRC mismatch: stored {h[_BODY_CRC]}, computed {body_crc(body)}")
    return total
