"""Transaction check-back (FACTS §9.3, FACTS-wave2 §4; broker:transaction/queue/
TransactionalMessageServiceImpl.java#check): the half messages neither committed nor rolled back
are asked about, and discarded after ``transactionCheckMax`` checks, as 4.9.8's check service
does. The scheduler's process runs it (a master's, as 4.9.8's), and this module owns its state.

Every ``transactionCheckInterval`` (the first pass that long after the start) a pass reads the op
queue past where it last read (each op record names an ended half), then walks the half queue
from ``halfOffset`` (below it every half is ended or discarded):

- an ended half is stepped over; ``halfOffset`` moves past the ended ones at the front;
- one younger than ``transactionTimeOut`` since its birth (its ``CHECK_IMMUNITY_TIME_IN_SECONDS``,
  if it has one) ends the walk: the younger ones after it wait for the next pass;
- one checked ``transactionCheckMax`` times already, or older than ``fileReservedTime``, is
  discarded: copied to TRANS_CHECK_MAX_TIME_TOPIC and ended by an op record, as one TX_END entry
  (so a commit racing it wins or loses whole, ``writer/transactions.py``); the producer is not told;
- any other is checked: CHECK_TRANSACTION_STATE, its body the half as the producer sent it (real
  topic and queue, ``TRANSACTION_CHECK_TIMES``), to one producer of its group, through the reader
  that holds that producer's connection (``shm/roster.py``; the reader passes it on); the producer
  answers with END_TRANSACTION, to any reader. With no producer of the group connected the check is
  not counted, as 4.9.8 only logs it.

Unlike 4.9.8, which stores a half again at the queue's end to count its checks, the counts are
kept here and in ``config/transactionCheck.json`` (``halfOffset``, ``opOffset``, ``checkTimes``),
written after a pass that changed them: a half is never stored twice, so its transaction is
named by one offset. After a crash the counts of the passes since the last write are lost (at
most that many checks more). The ended halves above ``halfOffset`` are read again from the op
queue at the start.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

from rocketbox.net import blocking
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.shm import protocol as P
from rocketbox.shm.layout import S
from rocketbox.shm.ringclient import RingClient
from rocketbox.shm.roster import GROUP, HOP, published
from rocketbox.shm.tables import TopicIndex
from rocketbox.store import configfile, message, transaction
from rocketbox.store.view import StoreView

log = logging.getLogger("rocketbox.scheduler")
CHECK_TIMES, IMMUNITY = b"TRANSACTION_CHECK_TIMES", b"CHECK_IMMUNITY_TIME_IN_SECONDS"
BATCH = 256


@dataclass(frozen=True)
class Pending:
    """A half message neither committed nor rolled back (``appliance transactions``)."""
    half_offset: int
    born_ms: int
    checks: int
    group: str
    topic: str
    msg_id: str


def pending(cfg, view: StoreView) -> list[Pending]:
    """The open transactions of a running appliance, oldest first: the half queue from the
    checker's ``halfOffset`` on, but those an op record ended, with their check counts."""
    data = configfile.read(os.path.join(cfg.config_dir, "transactionCheck.json")) or {}
    checks = {int(k): int(v) for k, v in (data.get("checkTimes") or {}).items()}
    ended = {half for _at, half in transaction.op_halves(view) if half is not None}
    out = []
    lo, hi = view.offsets(transaction.HALF_TOPIC, 0) or (0, 0)
    q = max(lo, int(data.get("halfOffset", 0)))
    for entries in view.queue_entries(transaction.HALF_TOPIC, 0, q, hi, BATCH):
        for phys, size in zip(entries["phys"].tolist(), entries["size"].tolist()):
            s = None if q in ended else view.stored(phys, size)
            if s is not None:
                head, props = s.head, s.props
                value = message.property_value
                out.append(Pending(q, head.born_ts, checks.get(q, 0),
                                   (value(props, transaction.PGROUP) or b"").decode("utf-8", "replace"),
                                   (value(props, transaction.REAL_TOPIC) or b"").decode("utf-8", "replace"),
                                   (value(props, b"UNIQ_KEY") or b"").decode("utf-8", "replace")))
            q += 1
    return out


class TransactionChecker:
    def __init__(self, cfg, shared, view: StoreView, ring: RingClient, topics: TopicIndex):
        self.cfg, self.sh, self.view, self.ring, self.topics = cfg, shared, view, ring, topics
        self.path = os.path.join(cfg.config_dir, "transactionCheck.json")
        self.half_offset = self.op_offset = 0
        self.checks: dict[int, int] = {}             # half offset -> checks sent
        self.ended: set[int] = set()                 # ended halves at or above half_offset
        self.next_at = time.monotonic() + cfg.transactionCheckInterval / 1000
        self.turn, self.dirty = 0, False
        self.unasked: dict[str, int] = {}            # group -> halves a pass found no producer to ask about

    def open(self) -> "TransactionChecker":
        data = configfile.read(self.path) or {}
        self.half_offset = int(data.get("halfOffset", 0))
        self.checks = {int(k): int(v) for k, v in (data.get("checkTimes") or {}).items()}
        lo = (self.view.offsets(transaction.OP_TOPIC, 0) or (0, 0))[0]
        self.op_offset = lo                           # every op record again: the ended ones above halfOffset
        self._read_ops()
        return self

    def persist(self) -> None:
        if not self.dirty:
            return
        configfile.write(self.path, {"halfOffset": self.half_offset, "opOffset": self.op_offset,
                                     "checkTimes": {str(k): v for k, v in sorted(self.checks.items())}})
        self.dirty = False

    def step(self) -> float:
        """A pass, when one is due -> seconds until the next."""
        now = time.monotonic()
        if now < self.next_at:
            return self.next_at - now
        self.next_at = now + self.cfg.transactionCheckInterval / 1000
        self._read_ops()
        self.unasked = {}
        self._walk(int(time.time() * 1000))
        for group, n in sorted(self.unasked.items()):
            log.info("transactions: %d open transactions of group %s wait for a producer of the group to ask", n, group)
        self.persist()
        return self.cfg.transactionCheckInterval / 1000

    def _read_ops(self) -> None:
        for at, half in transaction.op_halves(self.view, self.op_offset):
            if half is not None and half >= self.half_offset:
                self.ended.add(half)
            self.op_offset, self.dirty = at + 1, True

    def _walk(self, now_ms: int) -> None:
        lo, hi = self.view.offsets(transaction.HALF_TOPIC, 0) or (0, 0)
        if self.half_offset < lo:                      # retention took the oldest
            self.half_offset, self.dirty = lo, True
        q = self.half_offset
        for entries in self.view.queue_entries(transaction.HALF_TOPIC, 0, q, hi, BATCH):
            young = False
            for phys, size in zip(entries["phys"].tolist(), entries["size"].tolist()):
                if q not in self.ended and not self._look(q, phys, size, now_ms):
                    young = True                        # too young: the rest waits for the next pass
                    break
                q += 1
            if young:
                break
        while self.half_offset < q and self.half_offset in self.ended:   # past the ended ones in front
            self.ended.discard(self.half_offset)
            self.checks.pop(self.half_offset, None)
            self.half_offset += 1
            self.dirty = True

    def _look(self, q: int, phys: int, size: int, now_ms: int) -> bool:
        """Check, discard or leave the open half ``q`` -> False when it is too young to check."""
        s = self.view.stored(phys, size)
        if s is None:
            log.error("transactions: the half message at queue offset %d (CommitLog %d) does not read: "
                      "left out of the checks", q, phys)
            self.ended.add(q)
            return True
        head, body, props = s.head, s.body, s.props
        immunity = message.property_value(props, IMMUNITY)
        try:
            young_ms = int(immunity) * 1000 if immunity is not None else self.cfg.transactionTimeOut
        except ValueError:
            young_ms = self.cfg.transactionTimeOut
        age = now_ms - head.born_ts
        if age < young_ms:
            return False
        checks = self.checks.get(q, 0)
        if checks >= self.cfg.transactionCheckMax or age > self.cfg.fileReservedTime * 3_600_000:
            self._discard(q, head, body, props, checks)
        elif self._ask(q, head, body, props, checks + 1):
            self.checks[q], self.dirty = checks + 1, True
        return True

    def _ask(self, q: int, head, body: bytes, props: bytes, times: int) -> bool:
        """CHECK_TRANSACTION_STATE to a producer of the half's group -> whether one was asked."""
        group = (message.property_value(props, transaction.PGROUP) or b"").decode("utf-8", "replace")
        ports = [doc["port"] for doc in self._readers() if (doc.get("producers") or {}).get(group)]
        if not ports:
            self.unasked[group] = self.unasked.get(group, 0) + 1
            return False
        uniq = (message.property_value(props, b"UNIQ_KEY") or b"").decode("utf-8", "replace")
        record = transaction.check_record(head, body, message.with_properties(props, {CHECK_TIMES: b"%d" % times}))
        ext = {"tranStateTableOffset": str(q), "commitLogOffset": str(head.phys_offset), "msgId": uniq,
               "transactionId": uniq, "offsetMsgId": message.offset_msg_id(head.store_ip, head.store_port,
                                                                           head.phys_offset),
               HOP: "scheduler", GROUP: group}
        for i in range(len(ports)):                  # the next reader first, round robin
            port = ports[(self.turn + i) % len(ports)]
            try:
                got = blocking.call("127.0.0.1", port, Command(R.CHECK_TRANSACTION_STATE, ext, record))
            except OSError as e:
                log.warning("transactions: the reader at port %d did not pass a check on: %s", port, e)
                continue
            if got.code == 0:
                self.turn += i + 1
                return True
        return False

    def _readers(self) -> list[dict]:
        owners = self.sh.slots[:, S.OWNER_PID]
        return published(self.sh.roster_dir, {i: int(pid) for i, pid in enumerate(owners.tolist()) if pid > 0})

    def _discard(self, q: int, head, body: bytes, props: bytes, checks: int) -> None:
        """Copy the half to TRANS_CHECK_MAX_TIME_TOPIC and end it, as one TX_END entry."""
        tidx, op_tidx = self.topics.lookup(transaction.CHECK_MAX_TOPIC), self.topics.lookup(transaction.OP_TOPIC)
        if tidx is None or op_tidx is None:
            log.error("transactions: %s or %s is missing from the topic table: the half at %d stays",
                      transaction.CHECK_MAX_TOPIC, transaction.OP_TOPIC, q)
            return
        copy = message.record_again(head, body, message.with_properties(props, {CHECK_TIMES: b"%d" % checks}),
                                    topic=transaction.CHECK_MAX_TOPIC.encode(), queue_id=0)
        op = transaction.op_record(q, self.ring.store_ip, self.ring.store_port, int(time.time() * 1000))
        rows = [RingClient.row(tidx, 0, head.sys_flag, ("", 0), 1, False), RingClient.row(op_tidx, 0, 0, ("", 0), 1, False)]
        try:
            statuses = self.ring.end_transaction(q, rows, [len(copy), len(op)], copy + op)
        except TimeoutError:
            return                                     # the next pass tries again
        if all(s in (P.SUCCESS, P.TX_ENDED) for s in statuses):
            log.warning("transactions: the half at queue offset %d (group %s) was discarded after %d checks",
                        q, (message.property_value(props, transaction.PGROUP) or b"").decode("utf-8", "replace"),
                        checks)
            self.ended.add(q)
