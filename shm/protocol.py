"""What travels through the rings between a producer slot and the writer, declared once.

PUT (request ring), one entry = a slab of requests from one producer:
    SLAB_HEAD
    REQUEST x n_requests        one client request: a message or a batch of one topic/queue
    uint32  x n_records         size of each record, in order; request i owns ``count`` of them
    records                     complete stored records (store/message.py), placeholders for
                                queue offset, physical offset and store timestamp; 8-aligned start

PUT_RESULT (response ring), one entry per slab:
    RESULT_HEAD, RESULT x n_requests, int64 x n_records (physical offset of each record)

TOPIC (request ring): TOPIC_REQ then TopicConfig JSON.  TOPIC_RESULT: TOPIC_RES.

OFFSET (request ring, no reply): OFFSET_UPDATE x n, consumer offsets to commit, in order.
GROUP (request ring, no reply): a SubscriptionGroupConfig JSON (writer/groups.py).

TX_END (request ring): TX_END_HEAD, then a PUT slab: the records that end one transaction (the
committed message and the op record, or the op record alone). The writer appends them only if
that transaction was not ended before (``writer/transactions.py``), else it answers every request
of the slab TX_ENDED and appends nothing. Answered with a PUT_RESULT, as a PUT.

REPLICA (request ring, a slave's replicator): REPLICA_HEAD, then raw CommitLog bytes from the
master, to be written at ``offset`` as they are.  Answered with REPLICA_RESULT: SUCCESS when
``offset`` was the CommitLog's end, else MISPLACED (nothing written); ``written``: the end after it.

CUT (request ring, a slave's replicator): REPLICA_HEAD alone: cut the CommitLog back to ``offset``
(the master lost its tail).  Answered with REPLICA_RESULT: SUCCESS, ``written`` = ``offset``.
"""
from __future__ import annotations

import collections
import struct
from typing import Any

import numpy as np

from rocketbox.remoting.codes import ResponseCode
from rocketbox.shm.layout import OFFSET_KEY_BYTES
from rocketbox.shm.ring import align8

PUT, PUT_RESULT, TOPIC, TOPIC_RESULT, OFFSET, GROUP, TX_END, REPLICA, REPLICA_RESULT, CUT = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10

SLAB_HEAD = np.dtype([("n_requests", "<u4"), ("n_records", "<u4"), ("records_bytes", "<u8"),
                      ("pushed_ns", "<i8")])    # CLOCK_MONOTONIC (one clock for the box) when it was pushed
REQUEST = np.dtype([
    ("req_id", "<u8"),        # (claim_epoch << 40) | sequence, echoed in the RESULT
    ("topic_idx", "<i4"),     # index in the shared topic table
    ("queue_id", "<i4"),
    ("sys_flag", "<i4"),      # MessageSysFlag of every record in the request
    ("count", "<i4"),         # records in this request (1, or the batch size)
    ("flags", "<i4"),         # FLAG_WAIT: the producer will wait for the flush
    ("pad", "<i4"),
])
FLAG_WAIT = 1
RESULT_HEAD = np.dtype([("n_requests", "<u4"), ("n_records", "<u4")])
RESULT = np.dtype([
    ("req_id", "<u8"),
    ("status", "<i4"),        # RocketMQ response code: 0 SUCCESS, 1, 13, 14, 17
    ("queue_id", "<i4"),
    ("queue_offset", "<i8"),  # queue offset of the first record
    ("phys_offset", "<i8"),   # CommitLog offset of the first record
    ("end_offset", "<i8"),    # CommitLog offset just past the last record (flush/replica waits)
    ("store_ts", "<i8"),
    ("count", "<i4"),         # records of this request; their offsets follow in slab order
    ("pad", "<i4"),
])
TX_END_HEAD = np.dtype([("half_queue_offset", "<i8")])   # the half message's offset in RMQ_SYS_TRANS_HALF_TOPIC
REPLICA_HEAD = np.dtype([("req_id", "<u8"), ("offset", "<i8")])
REPLICA_RES = np.dtype([("req_id", "<u8"), ("status", "<i4"), ("pad", "<i4"), ("written", "<i8")])
TOPIC_REQ = np.dtype([("req_id", "<u8")])
TOPIC_RES = np.dtype([("req_id", "<u8"), ("status", "<i4"), ("topic_idx", "<i4")])
OFFSET_UPDATE = np.dtype([("key", f"S{OFFSET_KEY_BYTES}"), ("queue_id", "<i4"), ("pad", "<i4"), ("offset", "<i8")])

SUCCESS, SYSTEM_ERROR, MESSAGE_ILLEGAL, SERVICE_NOT_AVAILABLE, TOPIC_NOT_EXIST = (
    int(ResponseCode[name]) for name in ("SUCCESS", "SYSTEM_ERROR", "MESSAGE_ILLEGAL", "SERVICE_NOT_AVAILABLE",
                                         "TOPIC_NOT_EXIST"))           # (remoting/codes.py's table)
QUEUES_FULL = 1001      # rocketbox's own: a first write to a queue with no queue slot left (answered SYSTEM_ERROR)
TOPICS_FULL = 1002      # rocketbox's own: a new topic with no topic slot left (answered SYSTEM_ERROR)
TX_ENDED = 1003         # rocketbox's own: a TX_END for a transaction already committed or rolled back
MISPLACED = 1004        # rocketbox's own: REPLICA bytes that do not start at the CommitLog's end

_CODES = {"<u8": "Q", "<i8": "q", "<u4": "I", "<i4": "i"}


def names_of(dtype: np.dtype) -> tuple[str, ...]:
    """A record dtype's field names, in order."""
    assert dtype.names is not None, dtype
    return dtype.names


def struct_of(dtype: np.dtype) -> struct.Struct:
    """The same layout as a ``struct`` (for a few rows, packing them costs less than numpy's calls)."""
    assert dtype.fields is not None, dtype
    st = struct.Struct("<" + "".join(_CODES[dtype.fields[name][0].str] for name in names_of(dtype)))
    assert st.size == dtype.itemsize, dtype
    return st


SLAB_HEAD_S, REQUEST_S, RESULT_HEAD_S, RESULT_S = (struct_of(d) for d in (SLAB_HEAD, REQUEST, RESULT_HEAD, RESULT))
# where each field sits in a row as a Python tuple (``struct`` unpacks, ``tolist``): rows are read
# by name, ``row[RESULT_AT.status]``, at the cost of a tuple index
# (generated from the dtypes: Any to mypy)
REQUEST_AT: Any = collections.namedtuple("RequestAt", names_of(REQUEST))(*range(len(names_of(REQUEST))))
RESULT_AT: Any = collections.namedtuple("ResultAt", names_of(RESULT))(*range(len(names_of(RESULT))))


def slab_parts(requests: np.ndarray, sizes: np.ndarray, records: bytes, pushed_ns: int) -> list:
    head = np.zeros(1, SLAB_HEAD)
    head[0] = (len(requests), len(sizes), len(records), pushed_ns)
    sizes = np.ascontiguousarray(sizes, dtype="<u4")
    lead = SLAB_HEAD.itemsize + requests.nbytes + sizes.nbytes
    return [head, requests, sizes, b"\0" * (align8(lead) - lead), records]


def slab_bytes(rows: list[tuple], sizes: list[int], records: bytes, pushed_ns: int) -> list:
    """``slab_parts`` from Python rows (P.REQUEST tuples, req_id filled in): the same bytes."""
    lead = SLAB_HEAD.itemsize + len(rows) * REQUEST.itemsize + 4 * len(sizes)
    return [SLAB_HEAD_S.pack(len(rows), len(sizes), len(records), pushed_ns), b"".join(REQUEST_S.pack(*r) for r in rows),
            struct.pack(f"<{len(sizes)}I", *sizes), b"\0" * (align8(lead) - lead), records]


def result_bytes(results: list[tuple], phys: list[int]) -> list:
    """A PUT_RESULT entry from Python rows (P.RESULT tuples) and physical offsets."""
    return [RESULT_HEAD_S.pack(len(results), len(phys)), b"".join(RESULT_S.pack(*r) for r in results),
            struct.pack(f"<{len(phys)}q", *phys)]


def result_statuses(parts: list) -> list[int]:
    """The status of each request of a PUT_RESULT entry (its parts, as built for the ring)."""
    raw = b"".join(bytes(p) for p in parts)
    n = RESULT_HEAD_S.unpack_from(raw, 0)[0]
    return np.frombuffer(raw, RESULT, n, RESULT_HEAD.itemsize)["status"].tolist()


class BadSlab(ValueError):
    """A PUT slab that does not hold together.  ``requests``: its request rows when they are
    readable (each is then answered SYSTEM_ERROR), else None (nobody can be answered)."""

    def __init__(self, why: str, requests: np.ndarray | None = None):
        super().__init__(why)
        self.requests = requests


def parse_slab(payload: np.ndarray):
    """-> (requests, sizes, records uint8 view, byte offset of records inside ``payload``).
    BadSlab for a slab that does not hold together: too short for what its head claims, a
    request of no records, request counts that do not add up to the records, record sizes that
    do not add up to the record bytes."""
    if len(payload) < SLAB_HEAD.itemsize:
        raise BadSlab(f"slab of {len(payload)} bytes has no head")
    nq, nr, nb, _pushed = SLAB_HEAD_S.unpack_from(payload, 0)     # type: ignore[arg-type]  # an ndarray is a buffer
    at = SLAB_HEAD.itemsize
    lead = align8(at + nq * REQUEST.itemsize + nr * 4)
    if lead + nb > len(payload):
        readable = at + nq * REQUEST.itemsize <= len(payload)
        raise BadSlab(f"slab claims {nq} requests, {nr} records and {nb} record bytes but carries {len(payload)} bytes",
                      payload[at:at + nq * REQUEST.itemsize].view(REQUEST) if readable else None)
    requests = payload[at:at + nq * REQUEST.itemsize].view(REQUEST)
    at += nq * REQUEST.itemsize
    sizes = payload[at:at + nr * 4].view("<u4")
    counts = requests["count"].tolist()
    if sum(counts) != nr or min(counts, default=1) <= 0 or sum(sizes.tolist()) != nb:
        raise BadSlab(f"request counts and record sizes disagree ({nq} requests, {nr} records, {nb} bytes)", requests)
    return requests, sizes, payload[lead:lead + nb], lead
