"""Requests whose header fields are mutated (odd values of every kind, fields dropped, unknown ones
added), in both serializations, against a live appliance: every one is answered with a response
code, no handler fails (nothing logged at ERROR), and the appliance serves and stops as before.
A small, seeded form of the fuzzing that found three bugs on 2026-11-23 (ARCHITECTURE)."""
import json
import random

from rocketbox.appliance.check import check
from rocketbox.remoting import codec, headers
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.store import message
from tests.integration.test_readers import pull_n, send_v2
from tests.integration.wire import Wire

BASE = {"producerGroup": "pg", "topic": "Fz", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "queueId": "0",
        "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0", "properties": "TAGS\x01a\x02KEYS\x01k\x02",
        "reconsumeTimes": "0", "batch": "false", "consumerGroup": "cg", "queueOffset": "0", "maxMsgNums": "32",
        "commitOffset": "0", "subscription": "*", "subVersion": "0", "expressionType": "TAG", "timestamp": "0",
        "offset": "0", "clientID": "c1", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
ODD = ["", "-1", "2147483647", "-2147483648", "2147483648", "9223372036854775807", "99999999999999999999", "abc",
       " 7 ", "1.5", "TRUE", "\u00e9", "x" * 300, "%RETRY%cg", "TBW102", "SCHEDULE_TOPIC_XXXX", "a b", "*",
       "TagA || TagB", "\x01\x02", "WAIT\x01false\x02", "DELAY\x0199\x02", "UNIQ_KEY\x01\x02"]
CODES = [R.SEND_MESSAGE, R.SEND_MESSAGE_V2, R.SEND_BATCH_MESSAGE, R.PULL_MESSAGE, R.QUERY_CONSUMER_OFFSET,
         R.UPDATE_CONSUMER_OFFSET, R.UPDATE_AND_CREATE_TOPIC, R.SEARCH_OFFSET_BY_TIMESTAMP, R.GET_MAX_OFFSET,
         R.GET_MIN_OFFSET, R.GET_EARLIEST_MSG_STORETIME, R.VIEW_MESSAGE_BY_ID, R.GET_CONSUMER_LIST_BY_GROUP,
         R.UNREGISTER_CLIENT, R.HEART_BEAT]
HEARTBEAT = json.dumps({"clientID": "c1", "producerDataSet": [{"groupName": "pg"}], "consumerDataSet": [
    {"groupName": "cg", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
     "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False, "subscriptionDataSet": [
         {"topic": "Fz", "subString": "*", "classFilterMode": False, "tagsSet": [], "codeSet": [], "subVersion": 0}]}]})


def test_mutated_request_headers_all_get_a_response_code_and_no_handler_fails(appliance_factory):
    app = appliance_factory().start()
    w = Wire("127.0.0.1", app.cfg.listenPort, timeout=10)
    rng, codes = random.Random(11), set()
    batch = message.encode_client_batch([(0, b"b1", "KEYS\x01k1"), (0, b"b2", "")])
    for i in range(1000):
        code = rng.choice(CODES)
        ext = {f.name: BASE.get(f.name, "0") for f in headers.SCHEMAS.get(code, ())}
        for _ in range(rng.randint(1, 3)):
            key = rng.choice([*ext, "zz"]) if ext else "zz"
            if key in ext and rng.random() < 0.15:
                del ext[key]
            else:
                ext[key] = rng.choice(ODD)
        ext.pop("suspendTimeoutMillis", None)         # (a pull held for days would only wait)
        if code == R.PULL_MESSAGE:
            ext["suspendTimeoutMillis"] = "0"
        body = {R.SEND_BATCH_MESSAGE: batch, R.HEART_BEAT: HEARTBEAT.encode()}.get(code, b"hello")
        r = w.call(code, ext, body, serialize_type=rng.choice([codec.JSON, codec.ROCKETMQ]))
        assert r.opaque == w.opaque, (i, code, ext)
        codes.add(r.code)
    assert {RC.SUCCESS, RC.SYSTEM_ERROR} <= codes and len(codes) >= 4, codes
    assert send_v2(w, "FzAfter", b"fine").code == RC.SUCCESS
    assert pull_n(w, "FzAfter", 1) == [b"fine"]
    w.close()
    assert app.stop() == 0
    assert " ERROR " not in app.log_text(), [ln for ln in app.log_text().splitlines() if " ERROR " in ln][:5]
    assert check(app.cfg).clean
