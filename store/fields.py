"""The fixed fields of many records of one CommitLog file at once, as columns (the dispatcher's
pass): queue id, queue offset, sysflag, store timestamp, where the topic's length byte is, the
topic's length, where the properties are and their length (``fields``); and the records'
(topic, queue id) groups (``groups``).  Each is the compiled function of ``native/_native.c``
when it is built, else its numpy twin (``py_fields``, ``py_groups``), which gives the same
results and refuses the same records (``tests/unit/native``)."""
from __future__ import annotations

import numpy as np

from rocketbox.native import compiled
from rocketbox.store.message import (
    BORNHOST_V6,
    HEADER_V4_SIZE,
    HOST_V6_EXTRA,
    QUEUE_ID_AT,
    QUEUE_OFFSET_AT,
    STORE_TS_AT,
    STOREHOST_V6,
    SYSFLAG_AT,
)

QUEUE_ID, QUEUE_OFFSET, SYS_FLAG, STORE_TS, TOPIC_AT, TOPIC_LEN, PROPS_AT, PROPS_LEN = range(8)   # the rows
LAYOUT = (QUEUE_ID_AT, QUEUE_OFFSET_AT, SYSFLAG_AT, STORE_TS_AT, HEADER_V4_SIZE, HOST_V6_EXTRA, BORNHOST_V6,
          STOREHOST_V6)


def _gather(view: np.ndarray, at: np.ndarray, width: int, dtype: str) -> np.ndarray:
    """Big-endian integers of ``width`` bytes at each offset in ``at``, in one numpy gather."""
    return view[at[:, None] + np.arange(width)].view(dtype).ravel().astype(np.int64)


def _refuse(view: np.ndarray, starts: np.ndarray, layout: tuple) -> None:
    """IndexError naming the first record (in order) whose fields lie past ``view``, and which."""
    _q, _qoff, flag_at, _ts, header_v4, v6_extra, born_v6, store_v6 = layout
    b, size = view, view.size
    for s in starts.tolist():
        if s < 0 or s + header_v4 > size:
            raise IndexError(f"the record at {s} lies past its file")
        flag = int.from_bytes(b[s + flag_at:s + flag_at + 4].tobytes(), "big", signed=True)
        header = header_v4 + v6_extra * (bool(flag & born_v6) + bool(flag & store_v6))
        if s + header > size:
            raise IndexError(f"the record at {s} lies past its file")
        topic_at = s + header + int.from_bytes(b[s + header - 4:s + header].tobytes(), "big", signed=True)
        if topic_at < 0 or topic_at + 1 > size:
            raise IndexError(f"the record at {s}: its topic lies past its file")
        if topic_at + 3 + int(b[topic_at]) > size:
            raise IndexError(f"the record at {s}: its properties lie past its file")


def py_fields(view: np.ndarray, starts: np.ndarray, out: np.ndarray, layout: tuple = LAYOUT) -> None:
    """``fields``' columns into ``out`` (8 rows of int64, one column a record) with numpy gathers;
    IndexError for a record whose fields lie past ``view`` (``_refuse`` names the first)."""
    q_at, qoff_at, flag_at, ts_at, header_v4, v6_extra, born_v6, store_v6 = layout
    size = view.size
    if ((starts < 0) | (starts + header_v4 > size)).any():
        _refuse(view, starts, layout)
    flag = _gather(view, starts + flag_at, 4, ">i4")
    born6, store6 = (flag & born_v6) != 0, (flag & store_v6) != 0
    header = header_v4 + v6_extra * (born6.astype(np.int64) + store6)
    if (starts + header > size).any():
        _refuse(view, starts, layout)
    topic_at = starts + header + _gather(view, starts + header - 4, 4, ">i4")
    if ((topic_at < 0) | (topic_at + 1 > size)).any():
        _refuse(view, starts, layout)
    topic_len = view[topic_at].astype(np.int64)
    if (topic_at + 3 + topic_len > size).any():
        _refuse(view, starts, layout)
    out[QUEUE_ID] = _gather(view, starts + q_at, 4, ">i4")
    out[QUEUE_OFFSET] = _gather(view, starts + qoff_at, 8, ">i8")
    out[SYS_FLAG] = flag
    out[STORE_TS] = _gather(view, starts + ts_at + v6_extra * born6, 8, ">i8")
    out[TOPIC_AT], out[TOPIC_LEN] = topic_at, topic_len
    out[PROPS_AT] = topic_at + 3 + topic_len
    out[PROPS_LEN] = _gather(view, topic_at + 1 + topic_len, 2, ">i2")


def py_groups(view: np.ndarray, topic_at: np.ndarray, topic_len: np.ndarray, queue_id: np.ndarray,
              out: np.ndarray) -> list[int]:
    """``groups`` with numpy: the (topic, queue id) keys as rows of bytes, grouped by
    ``np.unique``, the groups then numbered in the order of their first record."""
    n = len(topic_at)
    bad = np.flatnonzero((topic_at < 0) | (topic_len < 0) | (topic_at + 1 + topic_len > view.size))
    if bad.size:
        raise IndexError(f"record {int(bad[0])}'s topic lies past its file")
    if not n:
        return []
    cols = np.arange(int(topic_len.max()) + 1)
    mat = view[np.minimum(topic_at[:, None] + cols, view.size - 1)]     # length byte, then the topic
    mat[cols > topic_len[:, None]] = 0
    qid = queue_id.astype(">i4").view(np.uint8).reshape(-1, 4)
    rows = np.ascontiguousarray(np.concatenate((mat, qid), axis=1))
    _, first, inverse = np.unique(rows.view(np.dtype((np.void, rows.shape[1]))).ravel(), return_index=True,
                                  return_inverse=True)
    order = np.argsort(first, kind="stable")                     # the groups in order of their first record
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    out[:] = rank[inverse.ravel()]
    return first[order].tolist()


_fields = compiled.fields if compiled is not None else py_fields
_groups = compiled.groups if compiled is not None else py_groups


def fields(view: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The columns of the records at ``starts`` (int64 offsets into ``view``, one file's uint8
    view): 8 rows (``QUEUE_ID`` ... ``PROPS_LEN``) of int64.  IndexError for a record whose
    fields lie past the file."""
    out = np.empty((8, len(starts)), dtype=np.int64)
    _fields(view, np.ascontiguousarray(starts, dtype=np.int64), out, LAYOUT)
    return out


def groups(view: np.ndarray, topic_at: np.ndarray, topic_len: np.ndarray, queue_id: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """The records' (topic, queue id) groups, the topics compared byte for byte (``TOPIC_AT`` and
    ``TOPIC_LEN`` rows: a length byte, then the topic): each record's group, numbered in the
    order of the groups' first records, and each group's first record."""
    out = np.empty(len(topic_at), dtype=np.int64)
    first = _groups(view, topic_at, topic_len, queue_id, out)
    return out, first
