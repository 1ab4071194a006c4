"""A pull body decoded into the client's messages: every field as the stored record has it, each
record's msgId from its own store host, compressed bodies inflated, text read as Java reads it."""
import zlib

import pytest

from rocketbox.client.message import decode_messages
from rocketbox.store import message as m
from rocketbox.store.errors import CorruptData


def test_every_field_comes_from_its_record():
    plain, packed = b"hello", zlib.compress(b"x" * 3000)
    records = [
        m.encode_record(topic=b"T", queue_id=3, body=plain, properties=b"TAGS\x01A\x02UNIQ_KEY\x01U1", flag=7,
                        born_ts=11, born_ip=b"\x0a\0\0\x01", born_port=5555, store_ip=b"\x7f\0\0\x01",
                        store_port=10911, reconsume_times=2, queue_offset=40, phys_offset=1000, store_ts=12),
        m.encode_record(topic="Tü".encode(), queue_id=0, body=packed, properties=b"KEYS\x01k\xc3", sys_flag=m.COMPRESSED,
                        born_ts=21, store_ip=bytes(range(16)), store_port=9876, queue_offset=41, phys_offset=2**40,
                        store_ts=22),
        m.encode_record(topic=b"T", queue_id=3, body=b"", properties=b"", born_ts=31, store_ip=b"\x7f\0\0\x01",
                        store_port=10911, queue_offset=42, phys_offset=3000, store_ts=32),
    ]
    got = decode_messages(b"".join(records), "b1")
    fields = [(x.topic, x.body, x.properties, x.queue_id, x.queue_offset, x.commit_log_offset, x.offset_msg_id,
               x.born_timestamp, x.store_timestamp, x.reconsume_times, x.flag, x.broker_name) for x in got]
    assert fields == [
        ("T", plain, {"TAGS": "A", "UNIQ_KEY": "U1"}, 3, 40, 1000, "7F00000100002A9F00000000000003E8", 11, 12, 2, 7, "b1"),
        ("Tü", b"x" * 3000, {"KEYS": "k\ufffd"}, 0, 41, 2**40,
         "000102030405060708090A0B0C0D0E0F000026940000010000000000", 21, 22, 0, 0, "b1"),
        ("T", b"", {}, 3, 42, 3000, "7F00000100002A9F0000000000000BB8", 31, 32, 0, 0, "b1")]
    assert [x.tags for x in got] == ["A", None, None] and got[0].msg_id == "U1"


def test_a_record_that_does_not_parse_names_the_pull_body_and_where():
    good = m.encode_record(topic=b"T", queue_id=0, body=b"a", properties=b"")
    bad = bytearray(good)
    bad[4:8] = b"\xde\xad\xbe\xef"
    with pytest.raises(CorruptData, match=rf"pull body @ {len(good)}: bad magic code 0xdeadbeef"):
        decode_messages(good + bytes(bad))
