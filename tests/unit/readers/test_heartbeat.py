"""HEART_BEAT bodies (readers/members.py ``parse_heartbeat``): every real client's capture reads
as it means (the C++ client's ordinal enums and string subVersion too), and a body that does not
fit HeartbeatData is refused with what is wrong, before any of it is registered."""
import glob
import os

import pytest

from rocketbox.readers.members import parse_heartbeat
from rocketbox.remoting import codec
from rocketbox.store.javahash import string_hash

CAPTURES = os.path.join(os.path.dirname(__file__), "../../captures")


def _body(name: str) -> bytes:
    with open(glob.glob(os.path.join(CAPTURES, name))[0], "rb") as f:
        return codec.Decoder().feed(f.read())[0].body


def test_the_captured_heartbeats_of_every_client():
    hb = parse_heartbeat(_body("cpp-rocketmq044__34_HEART_BEAT_pushconsumer.bin"))
    assert hb.client_id == "25272-127.0.0.1@DEFAULT" and [c.group for c in hb.consumers] == ["CID_TEST"]
    assert [(s.topic, s.expression, s.sub_version, s.tag_codes) for s in hb.consumers[0].subs] == [
        ("%RETRY%CID_TEST", "*", 1795281094964, None), ("TopicTest", "*", 1795281094964, None)]
    # the C++ client's enums are ordinals: named as Java names them
    c = hb.consumers[0]
    assert (c.consume_type, c.model, c.consume_from) == ("CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET")
    for name, group, version in (("java-4.9.8__34_HEART_BEAT_pushconsumer.bin", "CID_JAVA", 1795281414021),
                                 ("node-alions__34_HEART_BEAT_pushconsumer.bin", "CID_NODE", 1795281196768)):
        hb = parse_heartbeat(_body(name))
        assert hb.client_id and [c.group for c in hb.consumers] == [group]
        c = hb.consumers[0]
        assert (c.consume_type, c.model, c.consume_from) == ("CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET")
        topic_test = {s.topic: s for s in c.subs}["TopicTest"]
        assert (topic_test.expression, topic_test.sub_version, topic_test.tag_codes) == ("*", version, None)
        assert c.as_json()["subscriptionTable"]["TopicTest"] == {
            "classFilterMode": False, "codeSet": [], "expressionType": "TAG", "subString": "*",
            "subVersion": version, "tagsSet": [], "topic": "TopicTest"}


def test_tag_codes_of_a_filtered_subscription():
    hb = parse_heartbeat(b'{"clientID":"c","consumerDataSet":[{"groupName":"g","subscriptionDataSet":'
                         b'[{"topic":"T","subString":"TagA || TagB","codeSet":[%d,"%d"],"subVersion":"7"}]}],'
                         b'"producerDataSet":[{"groupName":"pg"},{"groupName":"CLIENT_INNER_PRODUCER"}]}'
                         % (string_hash("TagA"), string_hash("TagB")))
    sub = hb.consumers[0].subs[0]
    assert sub.tag_codes == [string_hash("TagA"), string_hash("TagB")] and sub.sub_version == 7
    assert sub.tags == ["TagA", "TagB"]                 # no tagsSet sent (the C++ client): the expression's
    assert hb.producers == ["pg", "CLIENT_INNER_PRODUCER"]
    assert hb.consumers[0].as_json() == {"subscriptionTable": {"T": sub.as_json()}}   # enums not sent: left out


@pytest.mark.parametrize("body, says", [
    (b"\xff\xfe", "not JSON"),
    (b"{nope", "not JSON"),
    (b"[]", "not a JSON object"),
    (b"null", "not a JSON object"),
    (b"{}", "no clientID"),
    (b'{"clientID": 5}', "no clientID"),
    (b'{"clientID": "c", "consumerDataSet": 3}', "consumerDataSet of the heartbeat is not a list"),
    (b'{"clientID": "c", "consumerDataSet": [1]}', "consumerDataSet entry 1 is not an object"),
    (b'{"clientID": "c", "consumerDataSet": [{"groupName": 7}]}', "consumer group name '7' is empty"),
    (b'{"clientID": "c", "producerDataSet": [{"groupName": ""}]}', "producer group name '' is empty"),
    (b'{"clientID": "c", "producerDataSet": ["pg"]}', "producerDataSet entry pg is not an object"),
    (b'{"clientID": "c", "consumerDataSet": [{"groupName": "g", "messageModel": "CLUSTER"}]}',
     "messageModel CLUSTER of group g is not one of BROADCASTING, CLUSTERING"),
    (b'{"clientID": "c", "consumerDataSet": [{"groupName": "g", "consumeType": 2}]}', "consumeType 2 of group g"),
    (b'{"clientID": "c", "consumerDataSet": [{"groupName": "%s"}]}' % (b"g" * 256), "longer than 255 bytes"),
    (b'{"clientID": "%s", "consumerDataSet": []}' % (b"c" * 249), "longer than 248 bytes"),
    (b'{"clientID": "c", "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": {"a": 1}}]}',
     "subscriptionDataSet of group g is not a list"),
    (b'{"clientID": "c", "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": ["T"]}]}',
     "subscriptionDataSet entry T is not an object"),
    (b'{"clientID": "c", "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [{"subString": "*"}]}]}',
     "has no topic"),
    (b'{"clientID": "c", "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [{"topic": "T", '
     b'"subString": 7}]}]}', "subString that is not text"),
    (b'{"clientID": "c", "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [{"topic": "T", '
     b'"subVersion": "x"}]}]}', "subscription to T: invalid literal"),
    (b'{"clientID": "c", "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [{"topic": "T", '
     b'"codeSet": ["a"]}]}]}', "subscription to T: invalid literal"),
    (b'{"clientID": "c", "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [{"topic": "T", '
     b'"codeSet": [4294967296]}]}]}', "past 32 bits"),
    (b'{"clientID": "c", "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [{"topic": "T", '
     b'"codeSet": 5}]}]}', "codeSet of topic T is not a list"),
])
def test_a_body_that_does_not_fit_is_refused_with_what_is_wrong(body, says):
    with pytest.raises(ValueError) as e:
        parse_heartbeat(body)
    assert says in str(e.value), str(e.value)
