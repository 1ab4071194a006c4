"""The frame codec fed every capture from real clients whole, byte by byte and with trailing
bytes; golden bytes from FACTS §1.3; garbage raises FrameError and nothing else."""
import glob
import json
import os
import random
import struct

import numpy as np
import pytest

from rocketbox.remoting import codec
from rocketbox.remoting.codec import Command, Decoder, FrameError
from rocketbox.remoting.codes import ResponseCode

CAPTURES = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "../../captures/*.bin")))
REMOTING = [p for p in CAPTURES if "h2c" not in p]


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def test_there_are_captures():
    assert len(REMOTING) >= 20


@pytest.mark.parametrize("path", REMOTING, ids=os.path.basename)
def test_capture_whole_bytewise_and_with_trailing_bytes(path):
    raw = _read(path)
    code = int(os.path.basename(path).split("__")[1].split("_")[0])
    (whole,) = Decoder().feed(raw)
    assert whole.code == code and not whole.is_response
    d, got = Decoder(), []
    for i in range(len(raw)):
        got += d.feed(raw[i:i + 1])
    assert len(got) == 1 and got[0].ext == whole.ext and got[0].body == whole.body
    d = Decoder()
    two = d.feed(raw + raw + raw[:7])                 # coalesced frames and the start of a third
    assert len(two) == 2 and two[1].opaque == whole.opaque and bytes(d.buf) == raw[:7]
    assert all(isinstance(v, str) for v in whole.ext.values())
    # what we encode decodes to the same command, in either serialization (the binary one, like
    # Java's, reads an empty string as null and drops the entry)
    for stype in (codec.JSON, codec.ROCKETMQ):
        whole.serialize_type = stype
        (again,) = Decoder().feed(codec.encode(whole))
        ext = whole.ext if stype == codec.JSON else {k: v for k, v in whole.ext.items() if v}
        assert (again.code, again.opaque, again.flag, again.ext, again.body, again.language) == \
               (whole.code, whole.opaque, whole.flag, ext, whole.body, whole.language)


def test_dialects_are_normalized_to_strings_and_names():
    by_name = {os.path.basename(p): Decoder().feed(_read(p))[0] for p in REMOTING}
    cpp = by_name["cpp-rocketmq044__10_SEND_MESSAGE.bin"]
    assert cpp.ext["queueId"] == "0" and cpp.ext["defaultTopicQueueNums"] == "4" and cpp.language == "CPP"
    assert cpp.body == b"hello from rocketmq 0.4.4"
    java_bin = by_name["java-4.9.8-ROCKETMQser__105_GET_ROUTEINFO_BY_TOPIC.bin"]
    assert java_bin.serialize_type == codec.ROCKETMQ and java_bin.ext["topic"] and java_bin.language == "JAVA"


def test_golden_binary_header_from_facts():
    cmd = Command(105, {"topic": "T"}, opaque=1, language="PYTHON", version=401, serialize_type=codec.ROCKETMQ)
    want = bytes.fromhex("00000025" "01000021" "0069" "03" "0191" "00000001" "00000000" "00000000" "0000000C"
                         "0005") + b"topic" + bytes.fromhex("00000001") + b"T"
    assert codec.encode(cmd) == want
    (back,) = Decoder().feed(want)
    assert (back.code, back.language, back.version, back.opaque, back.ext, back.remark) == (105, "PYTHON", 401, 1, {"topic": "T"}, None)


def test_response_keeps_opaque_and_serialization():
    req = Command(34, opaque=77, serialize_type=codec.ROCKETMQ)
    resp = req.response(3, "request type 34 not supported")
    assert resp.is_response and resp.opaque == 77 and resp.serialize_type == codec.ROCKETMQ
    raw = codec.encode(Command(10, opaque=5).response(0, ext={"msgId": "X", "queueId": "1"}))
    header = json.loads(raw[8:8 + (struct.unpack(">i", raw[4:8])[0] & 0xFFFFFF)])
    assert header["flag"] == 1 and header["opaque"] == 5 and header["extFields"] == {"msgId": "X", "queueId": "1"}


@pytest.mark.parametrize("stype", [codec.JSON, codec.ROCKETMQ])
def test_a_response_template_encodes_the_bytes_command_response_does(stype):
    keys, region = ("msgId", "queueId", "queueOffset"), {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
    t = codec.ResponseTemplate(keys, region)
    req = Command(310, opaque=991, serialize_type=stype)
    for code, remark, values in ((0, None, ("7F0000010000", "3", "12")), (10, "FLUSH_DISK_TIMEOUT", ("A,B", "0", "1")),
                                 (1, 'a "quoted" é\n', ("ü\t\\", "", "-1")), (0, "", ("x", "y", "z"))):
        want = codec.encode(req.response(code, remark, ext={**dict(zip(keys, values)), **region}))
        assert t.encode(req, code, remark, values) == want
        if remark is None and all(v.isalnum() for v in values):
            assert t.encode_ascii(req, code, tuple(v.encode() for v in values)) == want
        (back,) = Decoder().feed(want)
        assert back.is_response and back.opaque == 991 and back.code == code
    pull_keys = ("suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset")   # a pull's: no static part
    pull, req = codec.ResponseTemplate(pull_keys, {}), Command(11, opaque=5, serialize_type=stype)
    store = np.frombuffer(bytes(range(256)) * 3, dtype=np.uint8)
    for code, remark, parts in ((0, "FOUND", [store[:100], store[100:]]), (0, "FOUND", [store]),
                                (19, "OFFSET_OVERFLOW_ONE", [])):
        for values in (("0", "42", "0", "42"), ("0", "1042", "7", "12345678901")):
            want = codec.encode(req.response(code, remark, ext=dict(zip(pull_keys, values)), body=b"".join(parts)))
            assert pull.encode(req, code, remark, values, parts) == want
            pieces = pull.encode_pieces(req, code, remark, values, parts)     # what a reader writes
            assert b"".join(pieces) == want and all(a is b for a, b in zip(pieces[1:], parts))
            assert len(pieces) == 1 + len(parts)                 # the records' views as given, not copied


@pytest.mark.parametrize("stype", [codec.JSON, codec.ROCKETMQ])
def test_ascii_values_formatted_as_bytes_give_the_bytes_encode_gives(stype):
    """``encode_ascii`` (a stored send's reply) against ``encode``: a '%' in a key or static value
    is not a format, any code and opaque, values of any digit count."""
    t = codec.ResponseTemplate(("msgId", "a%s", "queueOffset"), {"MSG_REGION": "100%d", "TRACE_ON": "true"})
    for code, opaque, values in ((ResponseCode.SUCCESS, 0, ("7F0000010000", "3", "0")), (17, 2**31 - 1, ("AB", "", "9" * 19)),
                                 (0, -5, ("0" * 56, "12", "1"))):
        req = Command(310, opaque=opaque, serialize_type=stype)
        assert t.encode_ascii(req, code, tuple(v.encode() for v in values)) == t.encode(req, code, None, values)


def test_a_response_template_remembers_a_bounded_number_of_binary_shapes():
    t, req = codec.ResponseTemplate(("queueOffset",), {"TRACE_ON": "true"}), Command(310, opaque=3, serialize_type=codec.ROCKETMQ)
    for n in range(codec.ResponseTemplate.SHAPES + 40):          # as many value lengths, remarks too
        value, remark = "9" * (n % 300 + 1), None if n % 2 else f"r{n}"
        assert t.encode(req, n % 7, remark, (value,)) == codec.encode(req.response(n % 7, remark, ext={
            "queueOffset": value, "TRACE_ON": "true"}))
        assert len(t._bin_shapes) <= codec.ResponseTemplate.SHAPES


def test_binary_extfields_in_utf8_decode_and_invalid_utf8_is_a_frame_error():
    cmd = Command(310, {"b": "Topic", "i": "KEYS\x01ключ\x02TAGS\x01é"}, b"body", serialize_type=codec.ROCKETMQ)
    raw = codec.encode(cmd)
    (back,) = Decoder().feed(raw)
    assert back.ext == cmd.ext and back.body == b"body"
    bad = raw.replace("é".encode(), b"\xc3\x28")
    with pytest.raises(FrameError, match="invalid UTF-8"):
        Decoder().feed(bad)


def test_a_large_frame_in_small_reads_and_a_bad_length_split_across_reads():
    big = Command(310, {"b": "T"}, bytes(range(256)) * 4096, opaque=1, serialize_type=codec.ROCKETMQ)
    small = Command(310, {"b": "T"}, b"small", opaque=2)
    raw = codec.encode(big) + codec.encode(small)
    d, got = Decoder(), []
    for i in range(0, len(raw), 4093):
        got += d.feed(raw[i:i + 4093])
    assert [(c.opaque, c.body) for c in got] == [(1, big.body), (2, b"small")] and not d.buf
    d = Decoder()
    assert d.feed(b"\x7f\x00") == []                 # half of a length field
    with pytest.raises(FrameError, match="exceeds"):
        d.feed(b"\x00\x00" + b"x" * 8)


@pytest.mark.parametrize("raw, words", [
    (struct.pack(">i", 16 * 1024 * 1024 + 1) + b"x" * 8, "exceeds"),
    (struct.pack(">i", 2) + b"xx", "too small"),
    (struct.pack(">ii", 8, 100) + b"abcd", "runs past"),
    (struct.pack(">ii", 8, (7 << 24) | 4) + b"abcd", "serialize type 7"),
    (struct.pack(">ii", 9, 5) + b"{nope", "does not parse"),
    (struct.pack(">ii", 8, 4) + b"[1] ", "not an object"),
    (struct.pack(">ii", 25, (1 << 24) | 21) + struct.pack(">hBhiii", 10, 0, 0, 0, 0, 999) + b"\0\0\0\0", "remark length"),
    (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "HTTP/2"),
])
def test_malformed_frames_raise_frame_error_naming_the_problem(raw, words):
    with pytest.raises(FrameError, match=words):
        Decoder().feed(raw)


def test_h2c_preface_capture_is_refused():
    (path,) = [p for p in CAPTURES if "h2c" in p]
    with pytest.raises(FrameError, match="HTTP/2"):
        Decoder().feed(_read(path))


def test_garbage_raises_only_frame_error():
    rnd = random.Random(11)
    seeds = [_read(p) for p in REMOTING]
    for i in range(3000):
        raw = bytearray(rnd.choice(seeds))
        for _ in range(rnd.randint(1, 6)):
            raw[rnd.randrange(len(raw))] = rnd.randrange(256)
        if i % 3 == 0:
            raw = bytearray(rnd.randbytes(rnd.randint(0, 64)))
        try:
            Decoder().feed(bytes(raw))
        except FrameError:
            pass


def _binary(path) -> tuple[Command, bytes]:
    """A capture's command, and its bytes re-encoded with the binary header."""
    (cmd,) = Decoder().feed(_read(path))
    cmd.serialize_type = codec.ROCKETMQ
    return cmd, codec.encode(cmd)


def _seen(cmd):
    return ((cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark, cmd.ext, cmd.body, cmd.serialize_type)
            if isinstance(cmd, Command) else cmd)


def test_a_learnt_layout_reads_every_capture_alike():
    for path in REMOTING:
        sent, raw = _binary(path)
        first, second = Decoder().feed(raw + raw)
        # learnt: a map of ASCII, with no empty value (the binary header carries those, empty)
        learnt = bool(sent.ext) and all(k.isascii() and v.isascii() and v for k, v in sent.ext.items())
        assert first.fields is None and (second.fields is not None) == learnt, path
        assert _seen(second) == _seen(first), path
        assert second.fields is None                    # reading ext made the dict


def test_a_map_of_a_learnt_size_but_another_layout_is_read_entry_by_entry():
    a = Command(30, {"topic": "TopicA", "queueId": "12"}, serialize_type=codec.ROCKETMQ)
    b = Command(30, {"topic": "TopicAB", "queueId": "1"}, serialize_type=codec.ROCKETMQ)   # same map size
    c = Command(30, {"topix": "TopicA", "queueId": "12"}, serialize_type=codec.ROCKETMQ)   # another key
    got = Decoder().feed(b"".join(codec.encode(x) for x in (a, a, b, b, c, a)))
    assert [g.fields is not None for g in got] == [False, True, False, True, False, False]   # the last learnt wins
    assert [g.ext for g in got] == [a.ext, a.ext, b.ext, b.ext, c.ext, a.ext]


def test_a_header_of_a_learnt_size_with_a_remark_is_read_entry_by_entry():
    """The same header length with a remark (and a map that much shorter) is not the layout."""
    a = Command(30, {"topic": "TopicAB", "queueId": "12"}, serialize_type=codec.ROCKETMQ)
    b = Command(30, {"topic": "Top", "queueId": "12"}, remark="abcd", serialize_type=codec.ROCKETMQ)
    assert len(codec.encode(a)) == len(codec.encode(b))
    got = Decoder().feed(b"".join(codec.encode(x) for x in (a, a, b, a)))
    assert [g.fields is not None for g in got] == [False, True, False, True]
    assert [(g.remark, g.ext) for g in got] == [(None, a.ext), (None, a.ext), ("abcd", b.ext), (None, a.ext)]


def test_a_connection_learns_a_bounded_number_of_layouts():
    d = Decoder()
    frames = [codec.encode(Command(30, {"topic": "T" * n, "queueId": "1"}, serialize_type=codec.ROCKETMQ))
              for n in range(1, codec.Layouts.MAX + 11)]
    for f in frames:
        d.feed(f)
    assert d.layouts.learnt == codec.Layouts.MAX and len(d.layouts.by_size) == codec.Layouts.MAX
    (late,) = d.feed(frames[-1])                     # learnt after the bound: still read entry by entry
    (early,) = d.feed(frames[0])
    assert late.fields is None and early.fields is not None and early.ext == {"topic": "T", "queueId": "1"}


def test_garbage_reads_the_same_with_and_without_learnt_layouts():
    """Frames one client sent, changed in a few bytes: a decoder that learnt their layouts must read
    what a fresh one reads, or refuse them as it does."""
    rnd = random.Random(12)
    seeds = [_binary(p)[1] for p in REMOTING]
    primed = Decoder()
    primed.feed(b"".join(seeds))
    for _ in range(3000):
        raw = bytearray(rnd.choice(seeds))
        for _ in range(rnd.randint(1, 3)):
            raw[rnd.randrange(8, len(raw))] = rnd.choice((0, 1, 0x7f, 0xff, rnd.randrange(256)))
        outcomes = []
        for d in (Decoder(), primed):
            try:
                outcomes.append([_seen(c) for c in d.feed(bytes(raw))])
            except FrameError as e:
                outcomes.append(str(e))
            d.buf, d.need = bytearray(), 4           # a fresh stream for the next frame
        assert outcomes[0] == outcomes[1]


def test_the_codec_does_no_io():
    import rocketbox.remoting.codec as mod
    import rocketbox.remoting.codes as codes_mod
    for m in (mod, codes_mod):
        text = open(m.__file__).read()
        assert "import asyncio" not in text and "import socket" not in text


def test_json_headers_read_by_orjson_are_what_json_reads():
    """The JSON header parser is orjson, with json for what only json reads: wherever orjson
    parses a header (captured ones, mutated ones, odd ones), it must give exactly json's result,
    but for integers past 64 bits, which orjson reads as floats (a header field then is not an
    integer; no client sends such numbers)."""
    import orjson
    rnd = random.Random(13)
    heads = []
    for path in REMOTING:
        raw = _read(path)
        (lt,) = struct.unpack_from(">i", raw, 4)
        if lt >> 24 == codec.JSON:
            heads.append(raw[8:8 + (lt & 0xFFFFFF)])
    assert heads
    odd = [b'{"code":1,"code":2}', b'{"code":1e400}', b'{"code":NaN}', b'{"code":123456789012345678901234567890}',
           b'{"code":"\\ud800"}', b'{"code":"\\u00e9\\n"}', b' {"code" : -0 , "x":[1,{"y":null}]} ', b'{"code":1.5}',
           '{"code":"é"}'.encode(), b'{"code":1}x', b'\xef\xbb\xbf{"code":1}', b'{"a":"\x01"}']
    samples = odd + heads
    for _ in range(3000):
        raw = bytearray(rnd.choice(heads))
        for _ in range(rnd.randint(1, 3)):
            raw[rnd.randrange(len(raw))] = rnd.choice(b'{}[]":,\\0123456789-+.eE \x00\xffa')
        samples.append(bytes(raw))
    parsed = 0
    for raw in samples:
        try:
            got = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        want = json.loads(raw.decode("utf-8"))
        if _big_int(want):
            assert _big_int(want) and not _big_int(got)
            continue
        parsed += 1
        assert got == want, raw
    assert parsed > len(heads)


def _big_int(v) -> bool:
    if isinstance(v, dict):
        return any(_big_int(x) for x in v.values())
    if isinstance(v, list):
        return any(_big_int(x) for x in v)
    return type(v) is int and not -2**63 <= v < 2**64
