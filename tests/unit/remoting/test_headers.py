"""Header schemas decoding every capture's extFields, the dialects, and the errors; each case
both from a dict and from a binary header read through a learnt layout (Command.fields)."""
import glob
import os
import random

import pytest

from rocketbox.remoting import codec, headers
from rocketbox.remoting.codec import Command, Decoder
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.headers import HeaderError

CAPTURES = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "../../captures/*.bin")))


def _cmds():
    out = {}
    for p in CAPTURES:
        if "h2c" in p:
            continue
        with open(p, "rb") as f:
            out[os.path.basename(p)] = Decoder().feed(f.read())[0]
    return out


def _outcome(cmd):
    try:
        return "ok", headers.decode(cmd)
    except HeaderError as e:
        return "error", str(e)


def _decode(code: int, ext: dict):
    """``headers.decode`` of ``ext`` as a dict; and of the same map sent twice in a binary header,
    read entry by entry the first time and through its learnt layout the second, which must
    agree with each other, and with the dict unless the binary header dropped empty values."""
    by_dict = _outcome(Command(code, dict(ext)))
    frame = codec.encode(Command(code, ext, serialize_type=codec.ROCKETMQ))
    read, learnt = Decoder().feed(frame + frame)
    assert read.fields is None
    # an ASCII map with no empty value is read through its layout the second time
    assert (learnt.fields is not None) == (bool(ext) and all(v.isascii() and v for v in ext.values()))
    by_layout = _outcome(learnt)
    assert _outcome(read) == by_layout
    if "" not in ext.values():
        assert by_dict == by_layout
    if by_dict[0] == "error":
        raise HeaderError(by_dict[1])
    return by_dict[1]


def test_every_capture_with_a_schema_decodes():
    seen = 0
    for name, cmd in _cmds().items():
        if cmd.code in headers.SCHEMAS:
            h = _decode(cmd.code, cmd.ext)
            assert all(h[f.name] is not None for f in headers.SCHEMAS[cmd.code] if f.required), name
            seen += 1
    assert seen >= 15


def test_send_dialects_agree():
    cmds = _cmds()
    cpp = _decode(10, cmds["cpp-rocketmq044__10_SEND_MESSAGE.bin"].ext)
    java = _decode(310, cmds["java-4.9.8__310_SEND_MESSAGE_V2.bin"].ext)
    node = _decode(310, cmds["node-alions__310_SEND_MESSAGE_V2.bin"].ext)
    for h in (cpp, java, node):
        assert h["topic"] and h["producerGroup"] and isinstance(h["queueId"], int) and isinstance(h["bornTimestamp"], int)
    assert cpp["batch"] is False and cpp["defaultTopicQueueNums"] == 4
    batch = _decode(10, cmds["cpp-rocketmq044__10_SEND_MESSAGE_batch1.bin"].ext)
    assert batch["batch"] is True                       # the C++ client's "1"
    pull = _decode(11, cmds["cpp-rocketmq044__11_PULL_MESSAGE_push.bin"].ext)
    assert pull["sysFlag"] == 6 and pull["suspendTimeoutMillis"] == 15000 and pull["commitOffset"] == -1


def test_missing_and_bad_fields_name_the_field():
    with pytest.raises(HeaderError, match=r"<queueId> is null"):
        _decode(30, {"topic": "T"})
    with pytest.raises(HeaderError, match=r"<queueId> value 'x1' is not a number"):
        _decode(30, {"topic": "T", "queueId": "x1"})
    with pytest.raises(HeaderError, match=r"<queueId> value 2147483648 is out of range"):
        _decode(30, {"topic": "T", "queueId": "2147483648"})
    assert _decode(30, {"topic": "T", "queueId": "-1", "junk": "?"}) == {"topic": "T", "queueId": -1}


def test_encode_is_java_to_string():
    assert headers.encode({"offset": 5, "flag": True, "x": None, "s": "v"}) == {"offset": "5", "flag": "true", "s": "v"}


def test_generated_decoders_keep_the_edge_cases():
    v2 = {"a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "-1", "f": "0", "g": "1700000000000", "h": "0",
          "k": "TRUE", "m": "1", "queueId": "3"}
    h = _decode(310, v2)
    assert h["queueId"] == -1 and h["unitMode"] is True and h["batch"] is True and h["properties"] is None
    del v2["e"]
    assert _decode(310, v2)["queueId"] == 3                    # the long name when the letter is absent
    assert _decode(30, {"topic": "T", "queueId": "٣"})["queueId"] == 3    # Unicode digits, as Java
    assert _decode(30, {"topic": "", "queueId": " 7"}) == {"topic": "", "queueId": 7}
    with pytest.raises(HeaderError, match=r"<queueId> value '1_000' is not a number"):
        _decode(30, {"topic": "T", "queueId": "1_000"})
    with pytest.raises(HeaderError, match=r"<queueId> is null"):
        _decode(30, {"topic": "T", "queueId": ""})
    with pytest.raises(HeaderError, match=r"<commitOffset> value 9223372036854775808 is out of range"):
        _decode(R.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T", "queueId": "0",
                                                  "commitOffset": "9223372036854775808"})


def test_layout_decoders_agree_with_dict_decoders_on_random_headers():
    """Random SEND_MESSAGE_V2 and PULL_MESSAGE headers: short and long names, absent, odd and
    out-of-range values, through both paths (``_decode`` compares them)."""
    rnd = random.Random(5)
    odd = ["0", "-1", "+5", " 7", "007", "1_000", "x", "٣", "999999999", "1000000000", "2147483648", "-2147483649",
           "9223372036854775807", "9223372036854775808", "TRUE", "true", "1", "no", " True ", "", "é"]
    for code in (R.SEND_MESSAGE_V2, R.PULL_MESSAGE, R.SEND_MESSAGE):
        schema = headers.SCHEMAS[code]
        for _ in range(300):
            ext = {}
            for short, f in zip("abcdefghijklmn", schema):
                roll = rnd.random()
                if roll < 0.1:
                    continue
                name = short if code == R.SEND_MESSAGE_V2 and roll < 0.8 else f.name
                ext[name] = rnd.choice(odd) if rnd.random() < 0.15 else str(rnd.randrange(100)) if f.kind in "IL" \
                    else rnd.choice(["true", "false"]) if f.kind == "B" else f"v{rnd.randrange(1000)}"
            try:
                _decode(code, ext)
            except HeaderError:
                pass


def test_a_name_sent_twice_keeps_its_last_value_on_both_paths():
    def entry(k: bytes, v: bytes) -> bytes:
        return len(k).to_bytes(2, "big") + k + len(v).to_bytes(4, "big") + v
    ext = entry(b"topic", b"T") + entry(b"queueId", b"1") + entry(b"queueId", b"2")
    header = codec._BIN_FIXED.pack(R.GET_MAX_OFFSET, 0, 0, 1, 0, 0) + len(ext).to_bytes(4, "big") + ext
    frame = codec._framed(codec.ROCKETMQ, header, b"")
    read, learnt = Decoder().feed(frame + frame)
    assert learnt.fields is not None
    assert headers.decode(read) == headers.decode(learnt) == {"topic": "T", "queueId": 2}
    assert learnt.ext == {"topic": "T", "queueId": "2"} and learnt.fields is None
