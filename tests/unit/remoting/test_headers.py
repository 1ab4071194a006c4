"""Header schemas decoding every capture's extFields, the dialects, and the errors."""
import glob
import os

import pytest

from remoting import headers
from remoting.codes import RequestCode as R
from remoting.codec import Decoder
from remoting.headers import HeaderError

CAPTURES = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "../../captures/*.bin")))


def _cmds():
    out = {}
    for p in CAPTURES:
        if "h2c" in p:
            continue
        with open(p, "rb") as f:
            out[os.path.basename(p)] = Decoder().feed(f.read())[0]
    return out


def test_every_capture_with_a_schema_decodes():
    seen = 0
    for name, cmd in _cmds().items():
        if cmd.code in headers.SCHEMAS:
            h = headers.decode(cmd.code, cmd.ext)
            assert all(h[f.name] is not None for f in headers.SCHEMAS[cmd.code] if f.required), name
            seen += 1
    assert seen >= 15


def test_send_dialects_agree():
    cmds = _cmds()
    cpp = headers.decode(10, cmds["cpp-rocketmq044__10_SEND_MESSAGE.bin"].ext)
    java = headers.decode(310, cmds["java-4.9.8__310_SEND_MESSAGE_V2.bin"].ext)
    node = headers.decode(310, cmds["node-alions__310_SEND_MESSAGE_V2.bin"].ext)
    for h in (cpp, java, node):
        assert h["topic"] and h["producerGroup"] and isinstance(h["queueId"], int) and isinstance(h["bornTimestamp"], int)
    assert cpp["batch"] is False and cpp["defaultTopicQueueNums"] == 4
    batch = headers.decode(10, cmds["cpp-rocketmq044__10_SEND_MESSAGE_batch1.bin"].ext)
    assert batch["batch"] is True                       # the C++ client's "1"
    pull = headers.decode(11, cmds["cpp-rocketmq044__11_PULL_MESSAGE_push.bin"].ext)
    assert pull["sysFlag"] == 6 and pull["suspendTimeoutMillis"] == 15000 and pull["commitOffset"] == -1


def test_missing_and_bad_fields_name_the_field():
    with pytest.raises(HeaderError, match=r"<queueId> is null"):
        headers.decode(30, {"topic": "T"})
    with pytest.raises(HeaderError, match=r"<queueId> value 'x1' is not a number"):
        headers.decode(30, {"topic": "T", "queueId": "x1"})
    with pytest.raises(HeaderError, match=r"<queueId> value 2147483648 is out of range"):
        headers.decode(30, {"topic": "T", "queueId": "2147483648"})
    assert headers.decode(30, {"topic": "T", "queueId": "-1", "junk": "?"}) == {"topic": "T", "queueId": -1}


def test_encode_is_java_to_string():
    assert headers.encode({"offset": 5, "flag": True, "x": None, "s": "v"}) == {"offset": "5", "flag": "true", "s": "v"}


def test_generated_decoders_keep_the_edge_cases():
    v2 = {"a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "-1", "f": "0", "g": "1700000000000", "h": "0",
          "k": "TRUE", "m": "1", "queueId": "3"}
    h = headers.decode(310, v2)
    assert h["queueId"] == -1 and h["unitMode"] is True and h["batch"] is True and h["properties"] is None
    del v2["e"]
    assert headers.decode(310, v2)["queueId"] == 3                    # the long name when the letter is absent
    assert headers.decode(30, {"topic": "T", "queueId": "٣"})["queueId"] == 3    # Unicode digits, as Java
    assert headers.decode(30, {"topic": "", "queueId": " 7"}) == {"topic": "", "queueId": 7}
    with pytest.raises(HeaderError, match=r"<queueId> value '1_000' is not a number"):
        headers.decode(30, {"topic": "T", "queueId": "1_000"})
    with pytest.raises(HeaderError, match=r"<queueId> is null"):
        headers.decode(30, {"topic": "T", "queueId": ""})
    with pytest.raises(HeaderError, match=r"<commitOffset> value 9223372036854775808 is out of range"):
        headers.decode(R.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T", "queueId": "0",
                                                  "commitOffset": "9223372036854775808"})
