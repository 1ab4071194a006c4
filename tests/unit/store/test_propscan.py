import random

import numpy as np

from rocketbox.store import propscan
from rocketbox.store.message import parse_properties

NAMES = (b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY")


def _props(strings: list[str]) -> propscan.Props:
    """The strings laid out in a larger buffer with junk between them, as records in a CommitLog."""
    view, at, lens = bytearray(), [], []
    for s in strings:
        view += b"\x01\x02junk\x02\x01"
        at.append(len(view))
        lens.append(len(s.encode()))
        view += s.encode()
    view += b"\x01\x02"
    return propscan.gather(np.frombuffer(bytes(view), dtype=np.uint8), np.array(at), np.array(lens))


def _value(p, v, i):
    return bytes(p.buf[v.starts[i]:v.starts[i] + v.lens[i]]).decode()


def test_find_agrees_with_the_string_parser_on_random_properties():
    rnd = random.Random(7)
    parts = ["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT", "TAG", "XTAGS", "中文",
             "TAGZ", "UNIQ_KEX", "UNIQ_KEYS", "DELAX", "DELAYS", "DELA", "TAGS\x02"]   # near misses
    values = ["", "a", "k1 k2", "v\x01w", "3", "中"]
    strings = []
    for _ in range(400):
        pairs = [rnd.choice(parts) + "\x01" + rnd.choice(values)
                 for _ in range(rnd.randint(0, 5))]
        s = "\x02".join(pairs) + rnd.choice(["", "\x02"])
        strings.append(s)
    strings += ["", "\x02", "\x01", "TAGS", "TAGS\x01", "\x01TAGS\x01x", "TAGS\x01a\x02TAGS\x01b", "TAGS\x01a\x02TAGS\x01",
                "DELAY\x012"]                   # a name near the end of the buffer
    p = _props(strings)
    found = propscan.find(p, NAMES)
    for name in NAMES:
        v = found[name]
        assert (np.diff(v.rows) > 0).all()
        got = {int(r): _value(p, v, i) for i, r in enumerate(v.rows)}
        want = {r: parse_properties(s)[name.decode()] for r, s in enumerate(strings) if name.decode() in parse_properties(s)}
        assert got == want, name


def test_split_cuts_keys_at_spaces_and_drops_empty_pieces():
    strings = ["KEYS\x01a b", "KEYS\x01 lone ", "TAGS\x01x y", "KEYS\x01one", "KEYS\x01  a  b  "]
    p = _props(strings)
    pieces = propscan.split(p, propscan.find(p, (b"KEYS",))[b"KEYS"], ord(" "))
    got = [(int(r), _value(p, pieces, i)) for i, r in enumerate(pieces.rows)]
    assert got == [(0, "a"), (0, "b"), (1, "lone"), (3, "one"), (4, "a"), (4, "b")]


def test_no_properties_at_all():
    p = _props(["", ""])
    found = propscan.find(p, NAMES)
    assert all(v.rows.size == 0 for v in found.values())
    assert propscan.split(p, found[b"KEYS"], 32).rows.size == 0


def test_split_with_no_values_but_the_separator_elsewhere():
    """#49: no record has KEYS, a value of another property holds a space (a pass of plain
    messages and one with ``note=two words``, or a tombstone's reason): nothing to cut."""
    p = _props(["TAGS\x01a", "note\x01two words", "RBX_DAMAGED\x01body CRC mismatch"])
    found = propscan.find(p, NAMES)
    assert found[b"KEYS"].rows.size == 0
    pieces = propscan.split(p, found[b"KEYS"], ord(" "))
    assert pieces.rows.size == pieces.starts.size == pieces.lens.size == 0


def test_split_leaves_spaces_outside_the_values_alone():
    p = _props(["note\x01x y", "KEYS\x01k1 k2", "note\x01p q", "KEYS\x01k3"])
    pieces = propscan.split(p, propscan.find(p, (b"KEYS",))[b"KEYS"], ord(" "))
    assert [(int(r), _value(p, pieces, i)) for i, r in enumerate(pieces.rows)] == [(1, "k1"), (1, "k2"), (3, "k3")]
