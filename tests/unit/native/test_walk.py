"""The compiled record walks (native/_native.c) against their Python twins (store/walk.py): the
same generated CommitLog bytes, cut and damaged at seeded random places, through both; every
result must be equal, field for field."""
from __future__ import annotations

import random

import numpy as np
import pytest

from rocketbox.native import compiled
from rocketbox.store import message, walk
from tests.unit.replicator.test_protocol import FILE, commitlog

pytestmark = pytest.mark.skipif(compiled is None, reason="the compiled hot paths are not built (or "
                                                        "ROCKETBOX_PURE_PYTHON=1): nothing to compare")
MIN = message.MIN_RECORD_SIZE


def damaged(rng: random.Random, data: bytes) -> bytes:
    """``data`` with a few bytes overwritten at a random place (or as it is), as a disk or a peer
    might hand it over: a size, a magic or the middle of a body."""
    if rng.random() < 0.3:
        return data
    b = bytearray(data)
    at, n = rng.randrange(len(b) - 8), rng.choice([1, 4, 8])
    b[at:at + n] = rng.randbytes(n)
    return bytes(b)


@pytest.mark.parametrize("seed", range(40))
def test_the_dispatchers_walk_is_the_same_compiled_and_in_python(seed):
    rng = random.Random(seed)
    data = damaged(rng, commitlog(rng, 1))
    for _ in range(20):
        at = 0 if rng.random() < 0.5 else rng.randrange(FILE)
        stop = rng.choice([rng.randrange(at, FILE + 1), FILE + rng.randrange(1, FILE)])   # (past: written
        limit = rng.choice([min(stop, FILE), rng.randrange(at, min(stop, FILE) + 1)])      # is in a later file)
        args = (data, at, stop, limit, FILE, MIN)
        assert walk.records(*args) == walk.py_records(*args), args[1:]


@pytest.mark.parametrize("seed", range(40))
def test_the_slaves_stream_check_is_the_same_compiled_and_in_python(seed):
    rng = random.Random(seed)
    data = damaged(rng, commitlog(rng, 2))
    for _ in range(20):
        lo = rng.randrange(len(data))
        buf = memoryview(data)[lo:rng.randrange(lo, len(data) + 1)]
        skip = rng.choice([0, rng.randrange(0, 3000)])
        pos = rng.choice([lo, rng.randrange(0, 10 * FILE)])
        args = (buf, skip, pos, FILE, MIN)
        assert walk.headers(*args) == walk.py_headers(*args), (lo, len(buf), skip, pos)


@pytest.mark.parametrize("records", [walk.records, walk.py_records])
def test_a_walk_past_the_buffer_is_refused_not_read(records):
    with pytest.raises(ValueError, match="past the buffer"):
        records(b"\0" * 16, 0, 17, 17, FILE, MIN)


def _starts(data: bytes) -> list[int]:
    starts, _sizes, _end, _bad = walk.py_records(data, 0, len(data), len(data), FILE, MIN)
    return starts


@pytest.mark.parametrize("seed", range(30))
def test_the_dispatchers_columns_are_the_same_compiled_and_in_python(seed):
    """Every record's fixed fields, IPv4 and IPv6 hosts mixed, read at true record starts and at
    random offsets (damaged records): equal columns, or the same record refused."""
    from rocketbox.store import fields
    rng = random.Random(seed)
    data = bytearray()
    while len(data) < FILE - 8000:
        data += message.encode_record(
            topic=rng.randbytes(rng.randrange(1, 40)), queue_id=rng.randrange(-5, 1 << 20),
            body=rng.randbytes(rng.randrange(0, 2000)), properties=rng.randbytes(rng.randrange(0, 300)),
            queue_offset=rng.randrange(1 << 62), store_ts=rng.randrange(1 << 62), sys_flag=rng.randrange(1 << 16),
            born_ip=bytes(16) if rng.random() < 0.3 else bytes(4), store_ip=bytes(16) if rng.random() < 0.3 else bytes(4))
    view = np.frombuffer(bytes(data), dtype=np.uint8)
    for starts in (_starts(bytes(data)), sorted(rng.randrange(len(data)) for _ in range(50))):
        at = np.array(starts, dtype=np.int64)
        got, want = np.zeros((8, len(at)), np.int64), np.zeros((8, len(at)), np.int64)
        errors = []
        for impl, out in ((compiled.fields, got), (fields.py_fields, want)):
            try:
                impl(view, at, out, fields.LAYOUT)
                errors.append(None)
            except IndexError as e:
                errors.append(str(e))
        assert errors[0] == errors[1]
        if errors[0] is None:
            assert (got == want).all()


@pytest.mark.parametrize("seed", range(30))
def test_the_dispatchers_groups_are_the_same_compiled_and_in_python(seed):
    """Records of a few topics (some of one length, some prefixes of others) and queue ids,
    negative ones too, in a random order: the same group for each record, numbered alike, and the
    same first records; a topic past the file refused alike."""
    from rocketbox.store import fields
    rng = random.Random(seed)
    names = [rng.randbytes(rng.randrange(0, 20)) for _ in range(6)]
    names += [names[0] + b"x", names[1][:1]]
    buf = bytearray()
    at, lens, qids = [], [], []
    for _ in range(rng.randrange(0, 400)):
        name = rng.choice(names)
        at.append(len(buf))
        lens.append(len(name))
        qids.append(rng.choice([0, 1, 2, -1, 1 << 20]))
        buf += bytes([len(name)]) + name + rng.randbytes(rng.randrange(0, 5))
    view = np.frombuffer(bytes(buf) or b"\0", dtype=np.uint8)
    cols = [np.array(c, dtype=np.int64) for c in (at, lens, qids)]
    if cols[0].size and rng.random() < 0.3:
        cols[0][rng.randrange(cols[0].size)] = len(buf) + rng.randrange(-3, 5)      # past the file
    results = []
    for impl in (compiled.groups, fields.py_groups):
        out = np.full(len(at), -7, dtype=np.int64)
        try:
            results.append((impl(view, *cols, out), out.tolist()))
        except IndexError as e:
            results.append(str(e))
    assert results[0] == results[1]


def _props(rng: random.Random) -> bytes:
    """A record's properties as clients write them, and as they should not: pairs of wanted and
    other names, empty values, a name twice, a value holding ``\\x01``, stray separators, junk."""
    pairs = []
    for _ in range(rng.randrange(0, 8)):
        name = rng.choice([b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"TAG", b"KEYSX", b"", rng.randbytes(3)])
        value = rng.choice([b"", b"a", b"k1 k2  k3", b"v\x01w", rng.randbytes(rng.randrange(0, 12)), "é".encode()])
        pairs.append(name + b"\x01" + value if rng.random() < 0.9 else name)
    out = b"\x02".join(pairs)
    return out + (b"\x02" if rng.random() < 0.3 else b"")


@pytest.mark.parametrize("seed", range(40))
def test_the_property_scan_is_the_same_compiled_and_in_python(seed):
    from rocketbox.store import propscan
    rng = random.Random(seed)
    buf, at, lens = bytearray(rng.randbytes(5)), [], []
    for _ in range(rng.randrange(0, 300)):
        props = _props(rng)
        at.append(len(buf))
        lens.append(len(props))
        buf += props + rng.randbytes(rng.randrange(0, 4))
    view = np.frombuffer(bytes(buf), dtype=np.uint8)
    at_a, lens_a = np.array(at, dtype=np.int64), np.array(lens, dtype=np.int64)
    if lens_a.size and rng.random() < 0.2:
        lens_a[rng.randrange(lens_a.size)] = rng.choice([-1, len(buf)])      # past the file
    names = (b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY")
    results = []
    for scan in (propscan.scan, propscan.py_scan):
        try:
            p, found = scan(view, at_a, lens_a, names)
            results.append((p.buf.tobytes(), p.offs.tolist(), bytes(p.words.view(np.uint8)[:0]),
                            {k: (v.rows.tolist(), v.starts.tolist(), v.lens.tolist()) for k, v in found.items()},
                            p.words[:p.buf.size].tolist()))
        except ValueError as e:
            results.append(str(e))
    assert results[0] == results[1]


@pytest.mark.parametrize("seed", range(30))
def test_the_java_hashes_are_the_same_compiled_and_in_python(seed):
    """Tags and ``topic#key`` hashes: ASCII segments, segments with UTF-8 (and broken UTF-8) the
    callers decode, empty ones, with and without seeds (negative ones too)."""
    from rocketbox.store import javahashes
    rng = random.Random(seed)
    parts = [rng.choice([b"", b"TagA", rng.randbytes(rng.randrange(0, 40)), "キー-é".encode(), b"\xff\xfe",
                         bytes(rng.randrange(32, 127) for _ in range(rng.randrange(0, 300)))]) for _ in range(200)]
    buf = np.frombuffer(b"".join(parts) + b"\0", dtype=np.uint8)
    lens = np.array([len(x) for x in parts], dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64)
    pick = np.array(sorted(rng.sample(range(len(parts)), rng.randrange(0, len(parts)))), dtype=np.int64)
    seeds = rng.choice([None, np.array([rng.randrange(-2**31, 2**31) for _ in pick], dtype=np.int32)])
    got = javahashes.segment_hashes(buf, starts[pick], lens[pick], seeds)
    want = javahashes.py_segment_hashes(buf, starts[pick], lens[pick], seeds)
    assert got.dtype == want.dtype == np.int32 and got.tolist() == want.tolist()


@pytest.mark.parametrize("seed", range(12))
def test_the_index_put_writes_the_bytes_put_few_writes(tmp_path, seed):
    """Seeded runs of calls of random sizes into small IndexFiles (many slot collisions, files
    that fill up, a crash that leaves an uncommitted batch): the compiled pass and ``put_few``
    leave the same bytes and add the same counts."""
    from rocketbox.store.indexfile import IndexFile
    rng = random.Random(seed)
    slots, entries = rng.choice([1, 3, 7, 50]), rng.choice([20, 64, 300])
    comp, few = (IndexFile(str(tmp_path / name), slots, entries, True).open(create=True) for name in ("c", "f"))
    ts = 1_700_000_000_000 + rng.randrange(10**6)
    for call in range(40):
        k = rng.randrange(0, 30)
        hashes = [rng.randrange(0, 2**31) for _ in range(k)]
        phys = [call * 10_000 + i * 7 for i in range(k)]
        stamps = [ts + call * rng.randrange(0, 3000) + rng.randrange(-5000, 5000) for _ in range(k)]
        if rng.random() < 0.1 and k:                            # a crash: written, the header rolled back
            for ix in (comp, few):
                saved = [ix.h(f) for f in ("index_count", "end_phys", "end_ts", "slot_count")]
                ix.put_few(hashes, phys, stamps)
                for f, v in zip(("index_count", "end_phys", "end_ts", "slot_count"), saved):
                    ix.header[f] = v
        assert comp.put_compiled(hashes, phys, stamps) == few.put_few(hashes, phys, stamps), call
        assert comp.mf.mm[:] == few.mf.mm[:], call
    comp.close()
    few.close()
