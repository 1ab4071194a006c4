import struct
import zlib

import pytest

from rocketbox.store import message as m
from rocketbox.store.errors import CorruptData, MessageRejected


def make(**kw):
    args = dict(topic=b"TopicTest", queue_id=3, body=b"hello", properties=b"TAGS\x01TagA\x02KEYS\x01k1 k2",
                flag=7, born_ts=1700000000000, born_ip=bytes([10, 0, 0, 5]), born_port=5555,
                store_ip=bytes([10, 0, 0, 1]), store_port=10911, queue_offset=9, phys_offset=1234,
                store_ts=1700000000123)
    args.update(kw)
    return m.encode_record(**args)


def test_record_layout_golden_offsets():
    rec = make()
    body, topic, props = b"hello", b"TopicTest", b"TAGS\x01TagA\x02KEYS\x01k1 k2"
    assert len(rec) == 91 + len(body) + len(topic) + len(props)
    total, magic, crc, qid, flag, qoff, phys, sysflag = struct.unpack_from(">iiiiiqqi", rec)
    assert total == len(rec)
    assert rec[4:8] == bytes.fromhex("DAA320A7")
    assert crc == zlib.crc32(body) & 0x7FFFFFFF
    assert (qid, flag, qoff, phys, sysflag) == (3, 7, 9, 1234, 0)
    assert struct.unpack_from(">q", rec, 40)[0] == 1700000000000
    assert rec[48:52] == bytes([10, 0, 0, 5]) and struct.unpack_from(">i", rec, 52)[0] == 5555
    assert struct.unpack_from(">q", rec, 56)[0] == 1700000000123
    assert rec[64:68] == bytes([10, 0, 0, 1]) and struct.unpack_from(">i", rec, 68)[0] == 10911
    assert struct.unpack_from(">i", rec, 84)[0] == 5 and rec[88:93] == body
    assert rec[93] == 9 and rec[94:103] == topic
    assert struct.unpack_from(">h", rec, 103)[0] == len(props) and rec[105:] == props


def test_the_body_crc_is_zlibs_crc32_as_a_non_negative_java_int():
    """UtilAll.crc32 (java.util.zip.CRC32): the stored BODYCRC, computed with isal, over bodies
    of every length up to a few blocks, at every alignment, from bytes, bytearray and memoryview."""
    assert m.body_crc(b"hello") == 907060870 and m.body_crc(b"") == 0   # CRC32("hello") = 0x3610A686
    blob = bytes((i * 7 + i // 251) & 0xFF for i in range(5000))
    for n in (*range(0, 70), 255, 256, 1023, 1024, 1025, 4096, 4999):
        for at in (0, 1, 3):
            piece = blob[at:at + n]
            want = zlib.crc32(piece) & 0x7FFFFFFF
            assert m.body_crc(piece) == m.body_crc(bytearray(piece)) == m.body_crc(memoryview(blob)[at:at + n]) == want
    assert m.body_crc(b"\xff" * 1000) == zlib.crc32(b"\xff" * 1000) & 0x7FFFFFFF   # the top bit masked


def test_ipv6_hosts_grow_header_and_set_flags():
    rec = make(born_ip=bytes(16), store_ip=bytes(range(16)))
    r = m.decode_record(rec)
    assert r.sys_flag & (m.BORNHOST_V6 | m.STOREHOST_V6) == 0x30
    assert r.total_size == len(rec) == 91 + 24 + 5 + 9 + len(b"TAGS\x01TagA\x02KEYS\x01k1 k2")
    assert m.store_ts_at(r.sys_flag) == 68
    assert struct.unpack_from(">q", rec, 68)[0] == 1700000000123
    assert len(r.msg_id) == 56


def test_round_trip_decode():
    r = m.decode_record(make())
    assert r.topic == "TopicTest" and r.body == b"hello" and r.queue_id == 3
    assert r.properties == {"TAGS": "TagA", "KEYS": "k1 k2"}
    assert r.msg_id == "0A00000100002A9F00000000000004D2"


@pytest.mark.parametrize("ip", [bytes([127, 0, 0, 1]), bytes(range(16))])
def test_a_batch_of_msg_ids_is_each_id_comma_joined(ip):
    ids = m.MsgIds(ip, 10911)
    for offsets in ([0], [5, 2**40 + 5], [2**63 - 1, -1, 17], list(range(0, 32 * 1100, 1100))):
        assert ids.join(offsets) == ",".join(m.offset_msg_id(ip, 10911, o) for o in offsets)
        assert [ids.ascii_of(o) for o in offsets if o >= 0] == [m.offset_msg_id(ip, 10911, o).encode()
                                                                 for o in offsets if o >= 0]


def test_offset_msg_id_round_trip():
    mid = m.offset_msg_id(bytes([127, 0, 0, 1]), 10911, 2**40 + 5)
    assert mid == "7F00000100002A9F0000010000000005"
    assert m.parse_offset_msg_id(mid) == (bytes([127, 0, 0, 1]), 10911, 2**40 + 5)
    with pytest.raises(ValueError):
        m.parse_offset_msg_id("ABCD")


def test_properties_both_dialects():
    assert m.encode_properties({"a": "1", "b": "2", "c": None}) == "a\x011\x02b\x012"
    assert m.parse_properties("a\x011\x02b\x012\x02") == {"a": "1", "b": "2"}
    assert m.parse_properties("a\x011\x02\x01x\x02y\x01\x02zz") == {"a": "1"}
    # the first separator splits a pair (a value may hold \x01); a repeated name keeps its last value
    assert m.parse_properties("k\x01v\x01w\x02a\x011\x02a\x012\x02\x01\x02\x01\x01") == {"k": "v\x01w", "a": "2"}
    assert m.property_value(b"XTAGS\x01no\x02TAGS\x01yes", b"TAGS") == b"yes"
    assert m.property_value(b"KEYS\x01a b", b"KEYS") == b"a b"
    assert m.property_value(b"KEYS\x01a b", b"TAGS") is None


def test_check_record_detects_crc_magic_and_truncation():
    rec = bytearray(make())
    assert m.check_record(rec, 0) == len(rec)
    flipped = bytearray(rec)
    flipped[90] ^= 0xFF   # inside the body
    with pytest.raises(CorruptData, match="CRC"):
        m.check_record(flipped, 0)
    bad = bytearray(rec)
    bad[4] = 0
    with pytest.raises(CorruptData, match="magic"):
        m.check_record(bad, 0)
    with pytest.raises(CorruptData):
        m.check_record(rec[:-3], 0)
    with pytest.raises(CorruptData):
        m.check_record(bytes(200), 0)
    assert m.check_record(m.BLANK.pack(500, m.BLANK_MAGIC), 0) == 0


def test_validation_codes():
    for bad in ("", "  ", "a b", "x" * 128, "t/opic"):
        with pytest.raises(MessageRejected) as e:
            m.check_topic(bad)
        assert e.value.code == 1
    m.check_topic("%RETRY%group-1|x_y")
    with pytest.raises(MessageRejected) as e:
        m.check_sizes(10, 32768, 1024)
    assert e.value.code == 13
    with pytest.raises(MessageRejected) as e:
        m.check_sizes(1025, 10, 1024)
    assert e.value.code == 13


def test_a_record_template_encodes_what_encode_record_does():
    bodies = [b"", b"a", "ü".encode() * 300, bytes(range(256))]
    props = [b"", b"TAGS\x01A", b"KEYS\x01k1 k2\x02UNIQ_KEY\x01X", b"x" * 1000]
    flags = [0, 7, -1, 2**31 - 1]
    for born_ip, store_ip, sys_flag in ((b"\x0a\0\0\x01", b"\x7f\0\0\x01", 0),
                                        (bytes(range(16)), b"\x7f\0\0\x01", m.TX_PREPARED),
                                        (b"\x0a\0\0\x01", bytes(16), m.COMPRESSED)):
        common = dict(sys_flag=sys_flag, born_ip=born_ip, born_port=5555, store_ip=store_ip, store_port=10911,
                      reconsume_times=3, prepared_offset=99)
        t, got = m.RecordTemplate(b"TopicX", 5, **common), m.Records([], [])
        for i, (b, p, f) in enumerate(zip(bodies, props, flags)):
            t.add(got, 1234567890123 + i, b, p, f)
        want = [m.encode_record(topic=b"TopicX", queue_id=5, body=b, properties=p, flag=f, born_ts=1234567890123 + i,
                                **common) for i, (b, p, f) in enumerate(zip(bodies, props, flags))]
        assert got.sizes == [len(r) for r in want] and b"".join(got.parts) == b"".join(want)


def test_text_that_is_not_utf8_decodes_as_java_reads_it():
    """A batch's properties are stored as sent (RocketMQ's broker does the same), so a record may
    hold bytes that are not UTF-8: the consumer, the checker and VIEW_MESSAGE_BY_ID read them with
    U+FFFD, as Java's ``new String(bytes, UTF_8)`` does, not fail."""
    r = m.decode_record(make(properties=b"TAGS\x01T\xf9g\x02KEYS\x01k\xc3"))
    assert r.properties == {"TAGS": "T\ufffdg", "KEYS": "k\ufffd"} and r.body == b"hello"


def test_batch_records_are_the_messages_with_the_batch_properties_appended():
    extra = b"WAIT\x01true\x02CLUSTER\x01C"
    inner = [(7, b"two", "UNIQ_KEY\x01U2"), (8, b"three", "UNIQ_KEY\x01U3\x02"), (9, b"", ""), (-1, bytes(range(256)), "K\x01v")]
    props = [b"UNIQ_KEY\x01U2\x02" + extra, b"UNIQ_KEY\x01U3\x02" + extra, extra, b"K\x01v\x02" + extra]   # a separator only if missing
    for born_ip, store_ip, sys_flag in ((b"\x0a\0\0\x05", b"\x7f\0\0\x01", 0), (bytes(range(16)), b"\x7f\0\0\x01", 0),
                                        (b"\x0a\0\0\x05", bytes(16), m.COMPRESSED)):
        common = dict(sys_flag=sys_flag, born_ip=born_ip, born_port=5555, store_ip=store_ip,
                      store_port=10911, reconsume_times=4, prepared_offset=0)
        t = m.RecordTemplate(b"TopicT", 2, **common)
        got = m.encode_batch_records(m.encode_client_batch(inner), extra, 4096, t, 17)
        want = [m.encode_record(topic=b"TopicT", queue_id=2, body=b, properties=p, flag=f, born_ts=17, **common)
                for (f, b, _), p in zip(inner, props)]
        assert got.sizes == [len(r) for r in want] and b"".join(got.parts) == b"".join(want)
    t = m.RecordTemplate(b"T", 2, sys_flag=0, born_ip=b"\x0a\0\0\x05", born_port=5555, store_ip=b"\x7f\0\0\x01",
                         store_port=10911)
    batch = m.encode_client_batch(inner)
    wrong_total = struct.pack(">i", 99) + batch[4:]
    for bad, why in ((wrong_total, "sizes do not add up"), (batch[:10], "truncated"), (b"", "empty batch"),
                     (b"\x00\x00\x00\x50garbage" + bytes(20), "batch message 0"),
                     (m.encode_client_batch([(0, b"x" * 3000, "")] * 2), "exceeded maxMessageSize"),
                     (m.encode_client_batch([(0, b"x", "K\x01" + "v" * (32767 - 2 - len(extra)))]),
                      "properties length too long"),
                     (m.encode_client_batch([(0, b"x" * 4097, "")]), "body size exceeded")):
        with pytest.raises(MessageRejected, match=why) as e:
            m.encode_batch_records(bad, extra, 4096, t, 17)
        assert e.value.code == m.MESSAGE_ILLEGAL


def test_batch_properties_are_each_messages_own_until_the_body_stops_parsing():
    inner = [(7, b"two", "UNIQ_KEY\x01U2"), (8, b"TRAN_MSG\x01true", ""), (9, b"x", "TRAN_MSG\x01true\x02")]
    batch = m.encode_client_batch(inner)
    assert list(m.batch_properties(batch)) == [b"UNIQ_KEY\x01U2", b"", b"TRAN_MSG\x01true\x02"]
    assert list(m.batch_properties(batch[:-3])) == [b"UNIQ_KEY\x01U2", b""]      # the last one is cut short
    assert list(m.batch_properties(b"\x00\x00\x00\x50garbage")) == []
