"""The compiled remoting header paths (native/remoting.c) against their Python twins: JSON headers
(remoting/codec.py's py_json_header) and extFields typed by a request's schema (remoting/headers.py's
generated decoders).  Seeded generated headers, plain and odd, cut and damaged, through both: the
same command or the same error, field for field."""
from __future__ import annotations

import json
import random

import pytest

from rocketbox.native import compiled
from rocketbox.remoting import codec, headers

pytestmark = pytest.mark.skipif(compiled is None, reason="the compiled hot paths are not built (or "
                                                        "ROCKETBOX_PURE_PYTHON=1): nothing to compare")

_TEXTS = ["", "JAVA", "bench-producers", "TBW102", "UNIQ_KEY\x01AC11\x02TAGS\x01TagA\x02KEYS\x01k 1",
          "é", "日本語", "emoji 😀", "quote \" and \\ back", "tab\tline\nfeed", "slash /", "nul \x00 byte"]


def _text(rng: random.Random) -> str:
    return rng.choice(_TEXTS) if rng.random() < 0.8 else "".join(chr(rng.randrange(1, 0x3000)) for _ in range(5))


def _number(rng: random.Random):
    return rng.choice([0, 1, -1, 310, 409, 2**31 - 1, -2**31, 10**17, 10**18, -10**18, 10**25, 1.5, -0.0, 1e3])


def _value(rng: random.Random, key: str):
    """A value for ``key``: mostly what clients send, now and then another type."""
    r = rng.random()
    if r < 0.9:
        return {"code": rng.choice([10, 310, 320, 11]), "language": rng.choice(["JAVA", "CPP", "PYTHON"]),
                "version": 409, "opaque": rng.randrange(2**31), "flag": rng.choice([0, 1, 2, 3]),
                "remark": _text(rng)}.get(key, _text(rng))
    if r < 0.95:
        return _number(rng)
    return rng.choice([None, True, False, _text(rng), {"x": "y"}, [1, 2], {}])


def _ext(rng: random.Random):
    ext = {rng.choice("abcdefghijklmn") if rng.random() < 0.7 else _text(rng): _text(rng)
           for _ in range(rng.randrange(0, 15))}
    if rng.random() < 0.15:                                  # a client that sends numbers, booleans, nulls
        ext[rng.choice("abcd")] = rng.choice([3, True, None, 1.25, -7])
    return ext if rng.random() < 0.93 else rng.choice([None, {}, [], "x", 0])


def _serialized(rng: random.Random, h: dict) -> bytes:
    """``h`` as JSON the way a client might write it, or written by hand with escapes json does
    not make, or damaged."""
    text = json.dumps(h, ensure_ascii=rng.random() < 0.5, separators=rng.choice([(",", ":"), (", ", ": ")]))
    if rng.random() < 0.2:
        text = text.replace("/", "\\/").replace("e", "\\u0065", 1)
    if rng.random() < 0.2:
        text = rng.choice([" ", "\n", "\t\r "]) + text + rng.choice(["", " ", "\n"])
    raw = text.encode("utf-8")
    r = rng.random()
    if r < 0.05:
        raw = raw[:rng.randrange(len(raw))]
    elif r < 0.10:
        at = rng.randrange(len(raw))
        raw = raw[:at] + rng.choice([b"\xff", b"\xed\xa0\x80", b"\\ud800", b"\\udc00x", b"\x01", b"}", b'"', b"\\q"]) + raw[at:]
    elif r < 0.13:
        raw = raw + rng.choice([b",", b"x", b"{}"])
    return raw


def _header(rng: random.Random) -> dict:
    h = {}
    keys = ["code", "extFields", "flag", "language", "opaque", "remark", "serializeTypeCurrentRPC", "version"]
    for key in rng.sample(keys, rng.randrange(len(keys) - 2, len(keys) + 1)):
        h[key] = _ext(rng) if key == "extFields" else "JSON" if key == "serializeTypeCurrentRPC" and \
            rng.random() < 0.8 else _value(rng, key)
    if rng.random() < 0.1:
        h[_text(rng)] = _value(rng, "other")
    return h


def _outcome(read, raw: bytes):
    try:
        cmd = read(raw)
    except codec.FrameError as e:
        return "FrameError", str(e)
    return (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark, cmd.ext, cmd.body,
            cmd.serialize_type)


@pytest.mark.parametrize("seed", range(20))
def test_a_json_header_reads_the_same_compiled_and_in_python(seed):
    rng = random.Random(seed)
    taken = 0
    for _ in range(300):
        raw = _serialized(rng, _header(rng))
        taken += compiled.json_header(raw) is not None
        assert _outcome(codec._compiled_json_header, raw) == _outcome(codec.py_json_header, raw), raw
    assert taken > 60          # the compiled path took a fair share (the rest went to its twin)


def test_a_real_clients_send_header_is_taken_by_the_compiled_path():
    raw = (b'{"code":310,"extFields":{"a":"grp","b":"T","c":"TBW102","d":"4","e":"-1","f":"0","g":"1795954047982",'
           b'"h":"0","i":"UNIQ_KEY\\u00010A\\u0002WAIT\\u0001true","j":"0","k":"false","m":"false"},"flag":0,'
           b'"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":409}')
    code, language, version, opaque, flag, remark, ext = compiled.json_header(raw)
    assert (code, language, version, opaque, flag, remark) == (310, "JAVA", 409, 7, 0, None)
    assert ext["i"] == "UNIQ_KEY\x010A\x02WAIT\x01true" and ext == codec.py_json_header(raw).ext


_DIGITS = ["0", "7", "1023", "1024", "0042", "999999999", "1000000000", "2147483647", "2147483648",
           "-1", "+5", " 5", "5 ", "", "x", "1.0", "١٢", "9" * 18, "9" * 19, "-9223372036854775808"]
_BOOLS = ["true", "TRUE", "True", "false", "1", "0", "yes", " true", "", "FaLsE"]


def _ext_for(rng: random.Random, fields) -> dict:
    ext: dict = {}
    for short, f in zip("abcdefghijklmn", fields):
        if rng.random() < 0.12:
            continue                                       # absent
        value = rng.choice(_DIGITS) if f.kind in (headers.I, headers.L) else rng.choice(_BOOLS) \
            if f.kind == headers.B else _text(rng)
        if rng.random() < 0.05:
            value = rng.choice([5, None, True])            # not a string (set by code, not the wire)
        ext[short if rng.random() < 0.5 else f.name] = value
    return ext


def _typed(decode, ext: dict):
    try:
        return decode(ext)
    except headers.HeaderError as e:
        return "HeaderError", str(e)
    except (TypeError, AttributeError) as e:
        return type(e).__name__


@pytest.mark.parametrize("seed", range(20))
def test_a_headers_fields_are_typed_the_same_compiled_and_in_python(seed):
    rng = random.Random(seed)
    codes = sorted(headers.SCHEMAS)
    taken = 0
    for _ in range(200):
        code = rng.choice(codes)
        ext = _ext_for(rng, headers.SCHEMAS[code])
        taken += compiled.typed_header(ext, headers._SPECS[code]) is not None
        cmd = codec.Command(code, ext)
        assert _typed(lambda _ext: headers.decode(cmd), ext) == _typed(headers._DECODERS[code], ext), (code, ext)
    assert taken > 20
