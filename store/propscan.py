"""Named properties of many records at once, found with numpy instead of a loop per record.

The properties string (FACTS §4.1) is ``name\\x01value`` pairs joined by ``\\x02`` (older clients
also end it with ``\\x02``).  ``gather`` copies every record's properties into one buffer;
``find`` then locates each wanted name in every record with a fixed number of vector operations
and answers, per name, which records have it and where its value lies in the buffer (names are
compared four bytes at a time, through a u32 view at every byte offset).  As in
Java's ``string2messageProperties``, a pair with an empty value is dropped and a name that appears
twice keeps its last value (a HashMap).
``split`` cuts values at a separator (the space between several KEYS).  Pure: no I/O.
``scan`` is ``gather`` then ``find`` in one compiled pass over the records (``native/_native.c``)
when it is built; ``py_scan`` is its twin here, which gives the same results.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from rocketbox.native import compiled


class Props(NamedTuple):
    """Every record's properties in one buffer: record ``r`` owns ``buf[offs[r]:offs[r + 1]]``."""
    buf: np.ndarray         # uint8
    offs: np.ndarray        # int64, len(records) + 1
    words: np.ndarray       # little-endian u32 starting at every byte of buf (zeros past its end)


class Values(NamedTuple):
    """One name's values: record row, start in ``Props.buf`` and length, ordered by row."""
    rows: np.ndarray
    starts: np.ndarray
    lens: np.ndarray


def gather(view: np.ndarray, at: np.ndarray, lens: np.ndarray) -> Props:
    """Copy ``view[at[r]:at[r] + lens[r]]`` of every record ``r`` into one buffer (one join of
    slices: half the cost of a numpy gather, which builds an index per byte)."""
    offs = np.zeros(len(at) + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    total = int(offs[-1])
    mv = view.data
    padded = np.frombuffer(b"".join([mv[a:a + n] for a, n in zip(at.tolist(), lens.tolist())] + [b"\0\0\0"]),
                           dtype=np.uint8)
    return Props(padded[:total], offs, np.ndarray((total,), dtype="<u4", buffer=padded, strides=(1,)))


def find(p: Props, names: tuple[bytes, ...]) -> dict[bytes, Values]:
    buf, offs = p.buf, p.offs
    ones = np.flatnonzero(buf == 1)                  # name/value separators
    twos = np.flatnonzero(buf == 2)                  # property separators
    rec = np.searchsorted(offs, ones, side="right") - 1
    k = np.searchsorted(twos, ones)
    bounded = np.concatenate(([-1], twos, [buf.size]))  # the separators around each \x01
    name_at = np.maximum(bounded[k] + 1, offs[rec])
    # only the first \x01 of a pair separates its name (a value may itself contain \x01)
    first = np.ones(ones.size, dtype=bool)
    first[1:] = ones[:-1] < name_at[1:]
    value_end = np.minimum(bounded[k + 1], offs[rec + 1])
    name_len = ones - name_at
    useful = first & (value_end > ones + 1)          # Java drops pairs with an empty value
    out = {}
    for name in names:
        hit = np.flatnonzero(useful & (name_len == len(name)))
        for i in range(0, len(name), 4):             # the name's bytes, four at a time
            chunk, w = name[i:i + 4], p.words[name_at[hit] + i]
            if len(chunk) < 4:
                w = w & ((1 << 8 * len(chunk)) - 1)
            hit = hit[w == int.from_bytes(chunk, "little")]
        rows = rec[hit]
        last = np.ones(hit.size, dtype=bool)         # the last occurrence in a record wins
        last[:-1] = rows[1:] != rows[:-1]
        hit = hit[last]
        starts = ones[hit] + 1
        out[name] = Values(rec[hit], starts, value_end[hit] - starts)
    return out


def split(p: Props, v: Values, sep: int) -> Values:
    """Cut every value at each ``sep`` byte; empty pieces are dropped."""
    if v.starts.size == 0:                           # (separators elsewhere in the buffer cut nothing)
        return v
    ends = v.starts + v.lens
    cuts = np.flatnonzero(p.buf == sep)
    j = np.searchsorted(v.starts, cuts, side="right") - 1
    inside = (j >= 0) & (cuts < ends[np.maximum(j, 0)])
    cuts = cuts[inside]
    if cuts.size == 0:
        keep = v.lens > 0
        return Values(v.rows[keep], v.starts[keep], v.lens[keep])
    # values are disjoint and ordered, so sorted piece starts and ends pair up one to one
    starts = np.sort(np.concatenate((v.starts, cuts + 1)))
    piece_ends = np.sort(np.concatenate((cuts, ends)))
    lens = piece_ends - starts
    rows = np.searchsorted(p.offs, starts, side="right") - 1
    keep = lens > 0
    return Values(rows[keep], starts[keep], lens[keep])


def _check(view: np.ndarray, at: np.ndarray, lens: np.ndarray) -> None:
    bad = np.flatnonzero((lens < 0) | (at < 0) | (at + lens > view.size))
    if bad.size:
        raise ValueError(f"record {int(bad[0])}'s properties lie past its file")


def py_scan(view: np.ndarray, at: np.ndarray, lens: np.ndarray, names: tuple[bytes, ...]) -> tuple[Props, dict[bytes, Values]]:
    """``gather`` then ``find``: every record's properties, and each name's values."""
    _check(view, at, lens)
    p = gather(view, at, lens)
    return p, find(p, names)


def _compiled_scan(view: np.ndarray, at: np.ndarray, lens: np.ndarray,
                   names: tuple[bytes, ...]) -> tuple[Props, dict[bytes, Values]]:
    at, lens = np.ascontiguousarray(at, dtype=np.int64), np.ascontiguousarray(lens, dtype=np.int64)
    n, total = len(at), max(int(lens.sum()), 0)
    padded = np.zeros(total + 3, dtype=np.uint8)
    offs = np.empty(n + 1, dtype=np.int64)
    found = np.empty((len(names), 2, n), dtype=np.int64)
    assert compiled is not None
    compiled.props(view, at, lens, names, padded, offs, found)
    p = Props(padded[:total], offs, np.ndarray((total,), dtype="<u4", buffer=padded, strides=(1,)))
    out = {}
    for j, name in enumerate(names):
        rows = np.flatnonzero(found[j, 0] >= 0)
        out[name] = Values(rows, found[j, 0][rows], found[j, 1][rows])
    return p, out


scan = _compiled_scan if compiled is not None else py_scan
