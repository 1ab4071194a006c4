import mmap
import struct

import pytest

from rocketbox.store import message as m
from rocketbox.store import salvage

FILE = 4096


def _file(start: int, n: int = 5, body: bytes = b"payload-" * 20) -> tuple[mmap.mmap, list[int]]:
    """An anonymous 'CommitLog file' at global ``start``: ``n`` records, then the BLANK filler."""
    mm, at, starts = mmap.mmap(-1, FILE), 0, []
    for i in range(n):
        r = m.encode_record(topic=b"T", queue_id=i % 2, body=body + bytes([i]), properties=b"UNIQ_KEY\x01K%d" % i,
                            queue_offset=i // 2, phys_offset=start + at, store_ts=1000 + i, born_ts=900 + i)
        mm[at:at + len(r)] = r
        starts.append(at)
        at += len(r)
    mm[at:at + 8] = m.BLANK.pack(FILE - at, m.BLANK_MAGIC)
    return mm, starts + [at]


def test_verified_needs_every_check_and_the_record_where_it_says():
    mm, starts = _file(8192)
    sizes = [b - a for a, b in zip(starts, starts[1:])]
    assert [salvage.verified(mm, a, 8192 + a, FILE) for a in starts[:-1]] == sizes
    assert salvage.verified(mm, starts[-1], 8192 + starts[-1], FILE) == 0          # the filler, to the end
    assert salvage.verified(mm, starts[1], 8192 + starts[1] + 1, FILE) is None     # PHYSICALOFFSET says elsewhere
    mm[starts[1] + 100] ^= 0x40                                                     # a body byte
    assert salvage.verified(mm, starts[1], 8192 + starts[1], FILE) is None
    assert salvage.verified(mm, starts[-1] + 1, 8192 + starts[-1] + 1, FILE) is None


def test_resume_after_finds_the_next_verified_record_or_the_filler():
    mm, starts = _file(0)
    mm[starts[1] + 100] ^= 0x40
    assert salvage.resume_after(mm, starts[1], 0, FILE) == starts[2]
    mm[starts[2]:starts[4]] = bytes(starts[4] - starts[2])                          # two records zeroed
    assert salvage.resume_after(mm, starts[1], 0, FILE) == starts[4]
    mm[starts[4]:starts[5]] = bytes(starts[5] - starts[4])
    assert salvage.resume_after(mm, starts[1], 0, FILE) == starts[5]               # the BLANK filler
    mm[starts[5]:starts[5] + 8] = bytes(8)
    assert salvage.resume_after(mm, starts[1], 0, FILE) is None                    # nothing after: a torn tail


def test_a_copy_of_a_record_inside_a_body_is_not_taken_for_one():
    inner = m.encode_record(topic=b"T", queue_id=0, body=b"x", properties=b"", phys_offset=0)
    mm, starts = _file(0, n=3, body=b"..." + inner + b"...")
    mm[starts[0] + 10] ^= 1                     # the first record's CRC field: resume skips the copy in its body
    assert salvage.resume_after(mm, starts[0], 0, FILE) == starts[1]


def test_header_identity_only_when_the_fields_add_up_to_the_span():
    mm, starts = _file(0)
    a, size = starts[3], starts[4] - starts[3]
    mm[a + 100] ^= 0x40
    who = salvage.header_identity(mm, a, size)
    assert (who.topic, who.queue_id, who.queue_offset, who.store_ts, who.born_ts, who.source) == \
        (b"T", 1, 1, 1003, 903, "header")
    assert salvage.header_identity(mm, a, size + 1) is None                        # longer than its record
    struct.pack_into(">i", mm, a, size + 7)                                        # a damaged TOTALSIZE
    assert salvage.header_identity(mm, a, size) is None


@pytest.mark.parametrize("who", [salvage.Identity(b"Orders", 3, 41, 5000, 4000, "header"), salvage.UNKNOWN])
def test_a_tombstone_is_a_sound_record_of_exactly_the_span(who):
    length = 300
    stone = salvage.tombstone(length, 123456, who, "body CRC mismatch: stored 1, computed 2", b"\x7f\0\0\x01", 10911)
    assert len(stone) == length and m.check_record(stone, 0) == length
    r = m.decode_record(stone)
    assert salvage.is_tombstone(r.properties) and r.properties["RBX_DAMAGED"].startswith("body CRC mismatch")
    assert (r.topic.encode(), r.queue_id, r.phys_offset, r.store_ts, r.body) == \
        (who.topic, who.queue_id, 123456, who.store_ts, bytes(len(r.body)))
    if who is salvage.UNKNOWN:                  # neither queued nor indexed, by RocketMQ as by us
        assert (r.tx_type, r.queue_offset) == (m.TX_ROLLBACK, 0)
    else:
        assert (r.tx_type, r.queue_offset) == (m.TX_NOT, 41)
    short = salvage.tombstone(m.record_size(0, len(who.topic), 13), 0, who, "a long reason " * 10)
    assert m.decode_record(short).properties["RBX_DAMAGED"] == "1"
    with pytest.raises(ValueError, match="cannot hold a tombstone"):
        salvage.tombstone(m.record_size(0, len(who.topic), 12), 0, who, "x")
