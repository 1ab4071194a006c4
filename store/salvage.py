"""Damage inside the CommitLog: where valid records resume after a bad one, and the tombstone that
takes the damaged bytes' place.

A record is *verified* when its magic, sizes and body CRC hold and its PHYSICALOFFSET is where it
lies: no byte run inside a message body passes the last check by chance, so after a bad record
the next verified one (found through its magic code) is where the log goes on.

A *tombstone* is a well-formed record (FACTS §4.3) of exactly the damaged span's length, written
over it, so every later reader, ours or Apache RocketMQ's, walks past it as past any record:

* it keeps the damaged record's topic, queue id and queue offset when they are known (the
  record's own header, when its field lengths add up to the span, or the consume-queue entry that
  points at it), so its queue stays dense; its property ``RBX_DAMAGED`` says what failed, its
  body is zeros, it has no tags, keys or UNIQ_KEY;
* its consume-queue entry carries ``TOMBSTONE_TAGS`` as tagsCode, which readers skip (a pull
  moves past it) and no tag filter matches;
* when nothing says whose it was, it is a rollback-type record of ``DAMAGED_TOPIC`` (rollback
  records are neither queued nor indexed, by RocketMQ as by us).

Pure: works on buffers and mapped files already open; no I/O of its own.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from rocketbox.store import message
from rocketbox.store.errors import CorruptData

if TYPE_CHECKING:
    from rocketbox.store.mappedfile import MappedFile

TOMBSTONE_PROPERTY = "RBX_DAMAGED"
TOMBSTONE_TAGS = -(1 << 62)          # no tag hash (an int32) nor a delivery time (> 0) is this
DAMAGED_TOPIC = b"RBX_SYS_DAMAGED"
_MAGIC = struct.pack(">i", message.MAGIC)
_BLANK = struct.pack(">i", message.BLANK_MAGIC)
_PHYS = struct.Struct(">q")


@dataclass
class Identity:
    """Whose the damaged bytes were: where each field came from is ``source``."""
    topic: bytes
    queue_id: int
    queue_offset: int
    store_ts: int = 0
    born_ts: int = 0
    source: str = "unknown"          # "header", "consume queue" or "unknown"


UNKNOWN = Identity(DAMAGED_TOPIC, 0, 0)


def verified(buf, at: int, phys: int, size: int) -> int | None:
    """The size of the record at ``at`` of a file of ``size`` bytes whose offset ``at`` is global
    ``phys``, if it passes every check; 0 for the BLANK filler that runs exactly to the file's end;
    None otherwise."""
    if at + 8 > size:
        return None
    total, magic = message.HEAD.unpack_from(buf, at)
    if magic == message.BLANK_MAGIC:
        return 0 if total == size - at else None
    try:
        total = message.check_record(buf, at, True)
    except CorruptData:
        return None
    return total if phys_field(buf, at) == phys else None


def phys_field(buf, at: int) -> int:
    """The PHYSICALOFFSET the record at ``at`` says it lies at."""
    return _PHYS.unpack_from(buf, at + message.PHYS_OFFSET_AT)[0]


def first_bad(buf, offsets, sizes, phys) -> tuple[int, str]:
    """What a read checks before it hands records out: the record at each of ``offsets`` in
    ``buf`` (a memoryview), which its consume-queue entry says is ``sizes[i]`` bytes at CommitLog
    offset ``phys[i]``, passes recovery's checks (magic, sizes, field lengths, body CRC), has that
    TOTALSIZE and says it lies at that PHYSICALOFFSET.  -> (index of the first that does not, what
    failed), or (-1, "")."""
    for i, (at, size, p) in enumerate(zip(offsets, sizes, phys)):
        try:
            total = message.check_record(buf, at, True)
        except CorruptData as e:
            return i, e.why
        if total != size:
            return i, f"TOTALSIZE {total} is not its consume-queue entry's size {size}"
        if phys_field(buf, at) != p:
            return i, f"PHYSICALOFFSET {phys_field(buf, at)} is not where the record lies ({p})"
    return -1, ""


def check(mf, at: int, check_crc: bool = True) -> int:
    """Recovery's check of the record at ``at`` of a mapped CommitLog file ``mf``: its size (0 for
    a BLANK filler), else CorruptData naming what failed, PHYSICALOFFSET included."""
    if not mf.holds_data(at):
        raise CorruptData(mf.path, at, "no data here (a hole: the log was never written this far)")
    size = message.check_record(mf.mm, at, check_crc, mf.path)
    if size and phys_field(mf.mm, at) != mf.start + at:
        raise CorruptData(mf.path, at, f"PHYSICALOFFSET {phys_field(mf.mm, at)} is not where the record lies "
                                       f"({mf.start + at})")
    return size


class Step(NamedTuple):
    """One step of ``walk``: ``kind`` "record" (verified, ``length`` its size), "damage" (a span
    that failed its checks, ``length`` to the next verified record or its file's end, ``why``),
    "blank" (the file's end filler) or "tail" (a bad record with nothing verified after it: the
    log ends at ``at``; ``tail_length`` says how many bytes follow)."""
    kind: str
    i: int                  # index of the file in the walked list
    mf: MappedFile
    at: int
    length: int
    why: str | None

    @property
    def end(self) -> int:
        """The global offset just past this step (where the log ends, for a tail)."""
        return self.mf.start + self.at + (0 if self.kind == "tail" else self.length)


def walk(files: list, i: int = 0, at: int = 0, check_crc: bool = True, last: int | None = None):
    """The verified walk over CommitLog ``files`` (mapped, consecutive), from ``at`` in
    ``files[i]`` through ``files[last]`` (default: the last): every record checked as recovery
    checks it (``check``), damage stepped over to the next verified record (``damage_end``), each
    file's BLANK filler ending it, a torn tail ending the walk.  Recovery, ``appliance check`` and
    Spark's audit walk the log through it.  Yields ``Step``s."""
    for k in range(i, len(files) if last is None else last + 1):
        mf, pos = files[k], at if k == i else 0
        while pos < mf.size:
            try:
                size = check(mf, pos, check_crc)
            except CorruptData as e:
                resume = damage_end(files, k, pos)
                if resume is None:
                    yield Step("tail", k, mf, pos, 0, e.why)
                    return
                yield Step("damage", k, mf, pos, resume - pos, e.why)
                pos = resume
                continue
            if size == 0:
                yield Step("blank", k, mf, pos, mf.size - pos, None)
                break
            yield Step("record", k, mf, pos, size, None)
            pos += size


def damage_end(files: list, i: int, at: int) -> int | None:
    """Where damage found at ``at`` of ``files[i]`` ends: the next verified record in that file,
    or the file's end when a later file holds one; None when nothing verified follows it (the
    torn tail, where the log ends)."""
    mf = files[i]
    resume = resume_after(mf.mm, at, mf.start, mf.size, mf.data_spans(at))
    if resume is not None:
        return resume
    return mf.size if any(holds_verified(f) for f in files[i + 1:]) else None


def tail_length(mf, at: int) -> int:
    """How many bytes from ``at`` to the last non-zero byte of the file (a torn tail's size)."""
    for lo, hi in reversed(mf.data_spans(at)):
        nz = np.flatnonzero(mf.view[max(lo, at):hi])
        if nz.size:
            return max(lo, at) + int(nz[-1]) + 1 - at
    return 0


def holds_verified(mf) -> bool:
    """A mapped CommitLog file holds at least one verified record."""
    spans = mf.data_spans()
    return bool(spans) and (spans[0][0] == 0 and verified(mf.mm, 0, mf.start, mf.size) is not None
                            or resume_after(mf.mm, 0, mf.start, mf.size, spans) is not None)


def resume_after(buf, at: int, start: int, size: int, spans=None) -> int | None:
    """The first position past ``at`` in this file (global offset ``start``, ``size`` bytes) where
    a verified record or the file's BLANK filler starts, else None.  Candidates are found by their
    magic code (4 bytes in), so the walk costs a ``find`` over the bytes between; only the file's
    data ``spans`` ([lo, hi) ranges, ``MappedFile.data_spans``; all of it by default) are read."""
    for lo, hi in spans if spans is not None else [(0, size)]:
        found = _resume_within(buf, max(at + 1, lo), hi, start, size)
        if found is not None:
            return found
    return None


def _resume_within(buf, p: int, end: int, start: int, size: int) -> int | None:
    blank = -1
    while p + 8 <= end:
        if blank < p + 4:                  # (each search is a pass over the rest of the span: kept)
            blank = buf.find(_BLANK, p + 4, end)
            blank = end if blank < 0 else blank
        magic = buf.find(_MAGIC, p + 4, blank)
        cand = (blank if magic < 0 else magic) - 4
        if cand + 8 > end:
            return None
        if verified(buf, cand, start + cand, size) is not None:
            return cand
        p = cand + 1
    return None


def header_identity(buf, at: int, length: int) -> Identity | None:
    """The topic, queue and queue offset in the header at ``at``, when its field lengths add up
    to ``length`` (the damage is then in the body or the CRC, not in the fields that place it)."""
    if length < message.MIN_RECORD_SIZE or at + length > len(buf):
        return None
    (magic,) = struct.unpack_from(">i", buf, at + 4)
    sys_flag = struct.unpack_from(">i", buf, at + message.SYSFLAG_AT)[0]
    if magic != message.MAGIC or sys_flag & ~0x3F:
        return None
    hdr = message.header_for(sys_flag)
    h = message.Header._make(hdr.unpack_from(buf, at))
    body_len = h.body_len
    topic_at = at + hdr.size + body_len
    if body_len < 0 or topic_at + 3 > at + length:
        return None
    topic_len = buf[topic_at]
    props_at = topic_at + 1 + topic_len
    if props_at + 2 > at + length:
        return None
    props_len = struct.unpack_from(">h", buf, props_at)[0]
    if props_len < 0 or props_at + 2 + props_len != at + length or h.total_size != length:
        return None
    topic = bytes(buf[topic_at + 1:props_at])
    try:
        message.check_topic(topic.decode())
    except (UnicodeDecodeError, message.MessageRejected):
        return None
    return Identity(topic, h.queue_id, h.queue_offset, message.store_ts_of(buf, at), h.born_ts, "header")


def tombstone(length: int, phys: int, who: Identity, why: str, store_ip: bytes = b"\0\0\0\0",
              store_port: int = 0) -> bytes:
    """A record of exactly ``length`` bytes at ``phys`` standing for the damaged span (see the
    module's docstring); ``why`` is cut to fit.  Raises ValueError when even the shortest
    tombstone does not fit (a span shorter than any record of its topic)."""
    sys_flag = message.TX_ROLLBACK if who.source == "unknown" else message.TX_NOT
    for text in (why, why[:40], "1"):
        props = f"{TOMBSTONE_PROPERTY}{message.NAME_VALUE_SEP}{text or '1'}".encode()
        props = props[:message.PROPERTIES_MAX_LEN]
        fixed = message.record_size(0, len(who.topic), len(props), 0 if len(store_ip) == 4 else message.STOREHOST_V6)
        if fixed <= length:
            return message.encode_record(
                topic=who.topic, queue_id=who.queue_id, body=bytes(length - fixed), properties=props,
                sys_flag=sys_flag, born_ts=who.born_ts, store_ip=store_ip, store_port=store_port,
                queue_offset=who.queue_offset if sys_flag == message.TX_NOT else 0, phys_offset=phys,
                store_ts=who.store_ts)
    raise ValueError(f"a damaged span of {length} bytes cannot hold a tombstone of topic {who.topic!r}")


def is_tombstone(properties: dict) -> bool:
    return TOMBSTONE_PROPERTY in properties
