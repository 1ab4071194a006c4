"""A 5.x message as 4.x stored properties and body (grpcfront/convert.py), with the protocol's
own message types (grpcfront/v2.py, read from the installed wheel's descriptors)."""
from __future__ import annotations

import gzip
import os

import pytest

from rocketbox.grpcfront import convert, v2

pytestmark = pytest.mark.skipif(not os.path.isdir(os.path.join(v2.default_dir(), "rocketmq")),
                                reason="rocketmq-python-client is not installed in <venv>/rocketmq5")


def _message(**sp):
    proto = v2.load()
    m = proto.Message()
    m.topic.name, m.body = "T", b"hello"
    m.system_properties.message_id = "01ABC"
    for k, v in sp.items():
        if k == "keys":
            m.system_properties.keys.extend(v)
        elif k == "user":
            m.user_properties.update(v)
        elif k == "body":
            m.body = v
        else:
            setattr(m.system_properties, k, v)
    return m


def test_tags_keys_id_group_and_user_properties_become_4x_properties():
    m = _message(tag="TagA", keys=["k1", "k2"], message_group="g1", user={"color": "red"})
    assert convert.properties_of(m) == {"color": "red", "TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "01ABC",
                                        "__SHARDINGKEY": "g1", "WAIT": "true"}
    assert convert.properties_of(_message()) == {"UNIQ_KEY": "01ABC", "WAIT": "true"}


@pytest.mark.parametrize("kw, code", [
    ({"user": {"TAGS": "x"}}, "ILLEGAL_MESSAGE_PROPERTY_KEY"),
    ({"user": {"UNIQ_KEY": "x"}}, "ILLEGAL_MESSAGE_PROPERTY_KEY"),
    ({"tag": "a\x01b"}, "ILLEGAL_MESSAGE_TAG"),
    ({"message_id": ""}, "ILLEGAL_MESSAGE_ID"),
])
def test_what_a_4x_record_cannot_carry_is_refused_by_name(kw, code):
    with pytest.raises(convert.Refused) as e:
        convert.properties_of(_message(**kw))
    assert e.value.code == code and v2.load().code(code) > 0


def test_a_gzip_body_is_stored_decoded_and_sizes_are_checked_after_decoding():
    assert convert.body_of(_message(body=gzip.compress(b"x" * 1000), body_encoding=2), 1000) == b"x" * 1000
    with pytest.raises(convert.Refused) as e:
        convert.body_of(_message(body=gzip.compress(b"x" * 1001), body_encoding=2), 1000)
    assert e.value.code == "MESSAGE_BODY_TOO_LARGE"
    with pytest.raises(convert.Refused) as e:
        convert.body_of(_message(body=b"not gzip", body_encoding=2), 1000)
    assert e.value.code == "MESSAGE_CORRUPTED"
    assert convert.body_of(_message(body=b"plain", body_encoding=1), 1000) == b"plain"


def test_the_protocol_is_the_wheels_and_a_file_that_is_not_generated_says_so(tmp_path):
    proto = v2.load()
    assert {m.name for m in proto.methods} >= {"QueryRoute", "SendMessage", "ReceiveMessage", "Telemetry"}
    telemetry = next(m for m in proto.methods if m.name == "Telemetry")
    assert telemetry.client_streaming and telemetry.server_streaming
    assert proto.code("TOPIC_NOT_FOUND") == 40402 and proto.enum("MessageType", "FIFO") == 2
    (tmp_path / "x_pb2.py").write_text("x = 1\n")
    with pytest.raises(v2.ProtocolMissing, match="adds no serialized file descriptor"):
        v2.serialized_descriptor(str(tmp_path / "x_pb2.py"))
    with pytest.raises(v2.ProtocolMissing, match="install.sh installs rocketmq-python-client==5.1.2"):
        v2.load(str(tmp_path))


def _stored(m, **record):
    """The 4.x record a 5.x message is stored as, read back as a reader reads it."""
    from rocketbox.store import message
    props = message.encode_properties(convert.properties_of(m)).encode()
    raw = message.encode_record(topic=m.topic.name.encode(), queue_id=1, body=convert.body_of(m, 1 << 20), properties=props,
                                born_ts=1_700_000_000_123, born_ip=bytes([10, 0, 0, 7]), born_port=4321,
                                store_ip=bytes([127, 0, 0, 1]), store_port=10911, **record)
    return next(message.record_fields(raw, "test"))


def test_a_stored_5x_message_is_received_as_it_was_sent():
    proto = v2.load()
    sent = _message(tag="TagA", keys=["k1", "k2"], message_group="g1", user={"color": "red"})
    head, body, topic, props = _stored(sent)
    got = convert.message_of(proto, head, body, topic, props, receipt_handle="rbx1.1.0.5", attempt=3, invisible_ms=30_000)
    sp = got.system_properties
    assert (got.topic.name, got.body, dict(got.user_properties)) == ("T", b"hello", {"color": "red"})
    assert (sp.tag, list(sp.keys), sp.message_id, sp.message_group) == ("TagA", ["k1", "k2"], "01ABC", "g1")
    assert sp.message_type == proto.enum("MessageType", "FIFO")
    assert (sp.receipt_handle, sp.delivery_attempt, sp.invisible_duration.ToMilliseconds()) == ("rbx1.1.0.5", 3, 30_000)
    assert (sp.born_timestamp.ToMilliseconds(), sp.born_host, sp.store_host) == (1_700_000_000_123, "10.0.0.7:4321",
                                                                                 "127.0.0.1:10911")
    assert (sp.body_digest.type, sp.body_digest.checksum) == (proto.enum("DigestType", "CRC32"), "3610A686")  # crc32(b"hello")
    assert sp.queue_id == 1


def test_a_4x_record_is_received_with_its_system_properties_kept_out_and_its_body_inflated():
    import zlib

    from rocketbox.store import message
    proto = v2.load()
    props = message.encode_properties({"TAGS": "TagB", "KEYS": "a b", "WAIT": "true", "DELAY": "3", "REAL_TOPIC": "T",
                                       "mine": "1"}).encode()
    raw = message.encode_record(topic=b"T", queue_id=0, body=zlib.compress(b"x" * 5000), properties=props,
                                sys_flag=message.COMPRESSED, born_ts=1, born_ip=bytes(4), born_port=1,
                                store_ip=bytes([127, 0, 0, 1]), store_port=10911)
    head, body, topic, p = next(message.record_fields(raw, "test"))
    got = convert.message_of(proto, head, body, topic, p, receipt_handle="h", attempt=1, invisible_ms=1000)
    assert (got.body, dict(got.user_properties), got.system_properties.tag) == (b"x" * 5000, {"mine": "1"}, "TagB")
    assert got.system_properties.message_id == message.offset_msg_id(bytes([127, 0, 0, 1]), 10911, head.phys_offset)
    assert got.system_properties.message_type == proto.enum("MessageType", "DELAY")
    raw = message.encode_record(topic=b"T", queue_id=0, body=b"not zlib", properties=props, sys_flag=message.COMPRESSED,
                                born_ts=1, born_ip=bytes(4), born_port=1, store_ip=bytes([127, 0, 0, 1]), store_port=10911)
    head, body, topic, p = next(message.record_fields(raw, "test"))       # flagged compressed, but not: as stored
    assert convert.message_of(proto, head, body, topic, p, receipt_handle="h", attempt=1, invisible_ms=1000).body == b"not zlib"
