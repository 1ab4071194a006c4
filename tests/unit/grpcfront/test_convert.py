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
