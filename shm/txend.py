"""Ending a transaction through the writer: the half message at a CommitLog offset committed (its
message stored in its real topic and queue, then the op record that ends the half) or rolled back
(the op record alone), as one TX_END entry the writer appends only while the transaction is open
(``writer/transactions.py``), so a transaction ends once, whoever ends it (``store/transaction.py``
builds the records).  The readers' END_TRANSACTION and the gRPC front's EndTransaction both end
transactions here.
"""
from __future__ import annotations

import time
from typing import NamedTuple

from rocketbox.shm import protocol as P
from rocketbox.shm.ringclient import RingClient
from rocketbox.store import message, transaction

NOT_FOUND = "Find prepared transaction message failed"


class Half(NamedTuple):
    head: message.Header
    body: bytes
    props: bytes

    @property
    def group(self) -> str:
        """The producer group that sent it (``PGROUP``)."""
        return (message.property_value(self.props, transaction.PGROUP) or b"").decode("utf-8", "replace")


def half_at(view, phys: int) -> Half | None:
    """The half message stored at CommitLog offset ``phys``, or None when none is (bounded by
    ``written``: what the writer answered, any process finds)."""
    s = view.stored(phys)
    if s is None or s.topic != transaction.HALF_TOPIC_BYTES:
        return None
    return Half(s.head, s.body, s.props)


class Ended(NamedTuple):
    ok: bool                  # stored (or ended before)
    before: bool              # it was ended before: nothing stored now
    why: str                  # when not ok: what went wrong
    code: str                 # when not ok: "TOPIC_NOT_EXIST" (the real topic is gone) or "SYSTEM_ERROR"


async def end(link, topics, half: Half, commit: bool) -> Ended:
    """Commit or roll back ``half`` through ``link`` (a ``WriterLink``), ``topics`` its ``TopicIndex``."""
    head, body, props = half
    ring = link.ring
    op = transaction.op_record(head.queue_offset, ring.store_ip, ring.store_port, int(time.time() * 1000))
    op_topic = topics.lookup(transaction.OP_TOPIC)
    if op_topic is None:
        return Ended(False, False, f"{transaction.OP_TOPIC} is missing from the topic table", "SYSTEM_ERROR")
    rows, sizes, records = [], [], []
    if commit:
        committed = transaction.committed_record(head, body, props, head.phys_offset)
        real = (message.property_value(props, transaction.REAL_TOPIC) or b"").decode("utf-8", "surrogateescape")
        tidx = topics.lookup(real)
        if tidx is None:
            return Ended(False, False, f"topic[{real}] not exist, apply first please!", "TOPIC_NOT_EXIST")
        qid = int(message.property_value(props, transaction.REAL_QID) or b"0")
        sys_flag = (head.sys_flag & ~message.TX_MASK) | message.TX_COMMIT
        rows.append(RingClient.row(tidx, qid, sys_flag, ("", 0), 1, False))
        sizes.append(len(committed))
        records.append(committed)
    rows.append(RingClient.row(op_topic, 0, 0, ("", 0), 1, False))
    sizes.append(len(op))
    records.append(op)
    got = await link.end_transaction(head.queue_offset, rows, sizes, b"".join(records))
    if len(got) == 2 and isinstance(got[0], int):        # not stored: (code, remark)
        return Ended(False, False, str(got[1]), "SYSTEM_ERROR")
    statuses = [r[P.RESULT_AT.status] for r in got[0]]
    if all(s == P.TX_ENDED for s in statuses):
        return Ended(True, True, "", "")
    bad = [s for s in statuses if s != P.SUCCESS]
    if bad:
        return Ended(False, False, f"the transaction's records were not stored (writer status {bad[0]})", "SYSTEM_ERROR")
    return Ended(True, False, "", "")
