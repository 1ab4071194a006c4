"""Where records start in CommitLog bytes, the two loops that step from record to record:
``records``, the dispatcher's pass over one file, and ``headers``, a slave's check that its
master's stream is records before a byte is written (``replicator/protocol.Records``).  Each is
the compiled function of ``native/_native.c`` when it is built, else its Python twin below,
which gives the same results (``tests/unit/native``)."""
from __future__ import annotations

from rocketbox.native import compiled
from rocketbox.store.message import BLANK_MAGIC, HEAD, MAGIC


def py_records(buf, at: int, stop: int, limit: int, fsize: int, min_size: int) -> tuple[list, list, int, int]:
    """The records of one CommitLog file's bytes ``buf`` from ``at`` (a record boundary): a record
    must end by ``stop``, the walk stops at ``limit``, and a BLANK filler ends the file's records
    (``end`` = ``fsize`` when its header is below ``stop``).  -> (starts, sizes, end, bad): ``bad``
    is where a header that is neither a record nor a filler, a record shorter than ``min_size``,
    or a record or header across the file's end was met (else -1); the walk ends there."""
    starts: list[int] = []
    sizes: list[int] = []
    unpack, size = HEAD.unpack_from, len(buf)
    if limit > size:
        raise ValueError("limit past the buffer")
    while at < limit:
        if at + HEAD.size > stop:
            break
        if at + HEAD.size > size:        # a header across the file's end
            return starts, sizes, at, at
        total, magic = unpack(buf, at)
        if magic != MAGIC:
            if magic != BLANK_MAGIC:
                return starts, sizes, at, at
            if fsize <= stop:
                at = fsize               # the rest of this file is filler
            break
        if total < min_size or at + total > size:
            return starts, sizes, at, at
        if at + total > stop:
            break
        starts.append(at)
        sizes.append(total)
        at += total
    return starts, sizes, at, -1


def py_headers(buf, at: int, pos: int, fsize: int, min_size: int) -> tuple[int, int]:
    """A CommitLog stream's record headers: ``buf`` holds it from global offset ``pos``, and the
    next record starts ``at`` bytes in.  Each must be a record (MAGIC, ``min_size`` <= size <= the
    bytes left in its file) or a BLANK filler to its file's end.  -> (where the next header
    starts, from ``buf``'s start: past its end when a record runs on; the global offset of a
    header that is neither, else -1)."""
    end, unpack = len(buf), HEAD.unpack_from
    while at + HEAD.size <= end:
        total, magic = unpack(buf, at)
        left = fsize - (pos + at) % fsize
        if (magic == BLANK_MAGIC and total == left) or (magic == MAGIC and min_size <= total <= left):
            at += total
            continue
        return at, pos + at
    return at, -1


records = compiled.records if compiled is not None else py_records
headers = compiled.headers if compiled is not None else py_headers
