"""Which transactions are ended: the writer's ledger, so that a transaction is committed or rolled
back once, however many END_TRANSACTIONs come for it and from whichever readers.

A transaction is its half message (``store/transaction.py``), named by its queue offset in the
half queue (END_TRANSACTION's ``tranStateTableOffset``), and is ended by an op record naming that
offset, written after the committed message, or alone for a rollback. A reader sends both as one TX_END entry
(``shm/protocol.py``); the writer appends it only if ``take`` says the transaction is still open,
so two END_TRANSACTIONs racing on two readers end it once: the writer is the one process that
appends, and it decides in ring order.

The ledger is the set of ended half offsets, a bit each. It is rebuilt at ``open`` from the op
queue (the writer opens once the dispatcher has caught up, so the queue holds every op record
written) and kept by the writer alone. A pass's takes count only once its batch is committed
(``commit``): a pass that met a full disk is run again, and must find them open again.
"""
from __future__ import annotations

import logging

from rocketbox.store.transaction import OP_TOPIC, op_halves
from rocketbox.store.view import StoreView

log = logging.getLogger("rocketbox.writer")


class Bits:
    """A growing set of non-negative integers, a bit each."""

    def __init__(self) -> None:
        self.bits = bytearray()

    def __contains__(self, n: int) -> bool:
        i = n >> 3
        return i < len(self.bits) and bool(self.bits[i] >> (n & 7) & 1)

    def add(self, n: int) -> None:
        i = n >> 3
        if i >= len(self.bits):
            self.bits.extend(bytes(max(i + 1 - len(self.bits), len(self.bits))))   # doubling
        self.bits[i] |= 1 << (n & 7)


class Ledger:
    def __init__(self, cfg, shared):
        self.cfg, self.sh = cfg, shared
        self.ended = Bits()
        self.pending: set[int] = set()       # taken in the pass under way

    def open(self) -> "Ledger":
        """Every op record of the op queue marks its half offset ended."""
        view = StoreView(self.cfg, self.sh, name="writer").open()
        n = bad = 0
        try:
            for _at, half in op_halves(view):
                if half is None:
                    bad += 1
                else:
                    self.ended.add(half)
                    n += 1
        finally:
            view.close()
        if n or bad:
            log.info("transactions: %d ended ones read from %s%s", n, OP_TOPIC,
                     f" ({bad} op records unreadable, skipped)" if bad else "")
        return self

    def begin(self) -> None:
        if self.pending:
            self.pending.clear()

    def take(self, half_offset: int) -> bool:
        """True, and the transaction counted as ended by this pass, if it is open."""
        if half_offset < 0 or half_offset in self.ended or half_offset in self.pending:
            return False
        self.pending.add(half_offset)
        return True

    def forget(self, half_offset: int) -> None:
        """A take whose records were not appended after all: the transaction stays open."""
        self.pending.discard(half_offset)

    def commit(self) -> None:
        """The pass's batch is written: its takes are ended for good."""
        if self.pending:
            for half in self.pending:
                self.ended.add(half)
            self.pending.clear()

