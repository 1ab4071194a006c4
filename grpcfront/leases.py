"""A 5.x SimpleConsumer's state over 4.x queues, owned by the gRPC front alone: for each
(topic@group, queue), which messages it handed out and not had acked (each a ``Lease``: its
delivery attempt, the time it is visible again, the nonce of its receipt handle) and which it had
acked above the group's committed offset.  Sans-IO but for its journal.

- **Handing out.**  Leases that are due (invisible time over) go first, lowest offset first, each
  with its attempt counted; then offsets never handed out, from ``next``.  A FIFO group's queue
  hands out nothing while any of its leases is not due: its messages go one batch at a time, in
  queue order, a message again until it is acked (``QueueState.busy``).
- **Acks.**  The committed offset is the first offset not acked; it moves over acked offsets as
  they join it, and the front commits it to the consumer offset table (where 4.x tools and the
  lag metrics read a group's progress).
- **Receipt handles** name the queue, the offset and the lease's nonce (``handle`` / ``parse``):
  one given before the message was handed out again (or its invisible time changed) no longer
  acks it.
- **Durable.**  Every change is a line of the journal (``Journal``), written before the client is
  answered: a restart (of the front, or of the box) hands out again what was not acked, with its
  attempts, and nothing that was; a client's handle from before the restart still acks.  The
  journal is compacted into one line per queue and lease once it outgrows ``COMPACT_BYTES``.
"""
from __future__ import annotations

import logging
import os
import secrets
from dataclasses import dataclass

log = logging.getLogger("rocketbox.grpcfront")
NEVER = 2**62                       # the deadline of a lease being moved to the dead-letter queue
COMPACT_BYTES = 8 * 1024 * 1024
HANDLE_PREFIX = "rbx1"


@dataclass(slots=True)
class Lease:
    attempt: int            # deliveries so far, this one included (5.x's delivery_attempt)
    deadline_ms: int        # visible again from then (epoch ms)
    nonce: int              # its receipt handle's


def handle(queue_id: int, offset: int, nonce: int) -> str:
    """A receipt handle: what a client acks or changes the invisible time of a message with."""
    return f"{HANDLE_PREFIX}.{queue_id}.{offset}.{nonce:x}"


def parse(receipt_handle: str) -> tuple[int, int, int]:
    """-> (queue id, queue offset, nonce); ValueError for what this front never handed out."""
    parts = receipt_handle.split(".")
    if len(parts) != 4 or parts[0] != HANDLE_PREFIX:
        raise ValueError(f"receipt handle {receipt_handle[:64]!r} is not valid")
    qid, offset, nonce = int(parts[1]), int(parts[2]), int(parts[3], 16)
    if qid < 0 or offset < 0:
        raise ValueError(f"receipt handle {receipt_handle[:64]!r} is not valid")
    return qid, offset, nonce


def new_nonce() -> int:
    return secrets.randbits(48) or 1


class QueueState:
    """One (topic@group, queue)'s leases and acks."""
    __slots__ = ("committed", "next", "leases", "acked")

    def __init__(self, committed: int):
        self.committed = committed            # every offset below it is acked
        self.next = committed                 # the first offset never handed out
        self.leases: dict[int, Lease] = {}    # handed out, not acked
        self.acked: set[int] = set()          # acked offsets above ``committed`` (and skipped ones)

    def due(self, now_ms: int) -> list[int]:
        """Offsets of leases whose invisible time is over, lowest first."""
        return sorted(o for o, lease in self.leases.items() if lease.deadline_ms <= now_ms)

    def busy(self, now_ms: int) -> bool:
        """A lease is still invisible (a FIFO group's queue then waits)."""
        return any(lease.deadline_ms > now_ms for lease in self.leases.values())

    def next_deadline(self) -> int | None:
        """The soonest a lease becomes due (a held receive is woken then); None with none."""
        live = [lease.deadline_ms for lease in self.leases.values() if lease.deadline_ms < NEVER]
        return min(live) if live else None

    def acked_already(self, offset: int) -> bool:
        return offset < self.committed or offset in self.acked

    def ack(self, offset: int) -> bool:
        """``offset`` acked (or skipped) -> whether the committed offset moved."""
        self.leases.pop(offset, None)
        if offset < self.committed:
            return False
        self.acked.add(offset)
        if offset >= self.next:
            self.next = offset + 1
        return self._advance()

    def _advance(self) -> bool:
        """The committed offset over the acks that join it -> whether it moved."""
        moved = False
        while self.committed in self.acked:
            self.acked.discard(self.committed)
            self.committed += 1
            moved = True
        return moved

    def jump(self, offset: int) -> None:
        """Everything below ``offset`` is gone from the queue (retention) or was never to be read."""
        if offset > self.committed:
            self.committed = offset
            self.next = max(self.next, offset)
            self.leases = {o: lease for o, lease in self.leases.items() if o >= offset}
            self.acked = {o for o in self.acked if o >= offset}
            self._advance()


Key = tuple[bytes, int]              # (topic@group, queue id)


class Journal:
    """The leases' lines, appended before the client is answered:

    ``C key qid committed``   the committed offset (a new queue's start; a compaction's, a jump's)
    ``L key qid offset attempt deadline nonce``   a lease given (or its invisible time changed)
    ``A key qid offset``      acked, or stepped over (a message the filter does not take)

    written to the OS at once (``os.write``: a killed front loses nothing) and synced to disk once
    a second (``sync``), as ASYNC_FLUSH treats the CommitLog."""

    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.fd = -1
        self.pending: list[str] = []
        self.dirty = False

    def replay(self) -> dict[Key, QueueState]:
        """The state the journal holds (a line it cannot read is logged once and stepped over)."""
        states: dict[Key, QueueState] = {}
        try:
            f = open(self.path, encoding="ascii", errors="replace")
        except FileNotFoundError:
            return states
        bad = 0
        with f:
            for n, line in enumerate(f, 1):
                parts = line.split()
                try:
                    kind, key, qid = parts[0], parts[1].encode(), int(parts[2])
                    nums = [int(p) for p in parts[3:]]
                    st = states.get((key, qid))
                    if kind == "C":
                        if st is None:
                            st = states[(key, qid)] = QueueState(nums[0])
                        st.jump(nums[0])
                        continue
                    if st is None:
                        raise ValueError("a queue with no C line before it")
                    if kind == "L":
                        offset, attempt, deadline, nonce = nums
                        if offset >= st.committed and offset not in st.acked:
                            st.leases[offset] = Lease(attempt, deadline, nonce)
                            st.next = max(st.next, offset + 1)
                    elif kind == "A":
                        st.ack(nums[0])
                    else:
                        raise ValueError(f"unknown line kind {kind!r}")
                except (ValueError, IndexError) as e:
                    if not bad:
                        log.warning("%s line %d is not a journal line (%s): stepped over", self.path, n, e)
                    bad += 1
        if bad:
            log.warning("%s: %d lines stepped over", self.path, bad)
        return states

    def open(self) -> None:
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def committed(self, key: bytes, qid: int, offset: int) -> None:
        self.pending.append(f"C {key.decode()} {qid} {offset}\n")

    def leased(self, key: bytes, qid: int, offset: int, lease: Lease) -> None:
        self.pending.append(f"L {key.decode()} {qid} {offset} {lease.attempt} {lease.deadline_ms} {lease.nonce}\n")

    def acked(self, key: bytes, qid: int, offset: int) -> None:
        self.pending.append(f"A {key.decode()} {qid} {offset}\n")

    def write(self) -> None:
        """The lines so far, to the OS (before the client hears of them).  A write that fails (a
        full disk) keeps them, to be written with the next (a line written twice replays the same)."""
        if self.pending:
            data = "".join(self.pending).encode()
            while data:
                data = data[os.write(self.fd, data):]
            self.pending = []
            self.dirty = True

    def sync(self) -> None:
        if self.dirty:
            os.fdatasync(self.fd)
            self.dirty = False

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def compact(self, states: dict[Key, QueueState]) -> None:
        """Rewrite the journal as the state now: a C line a queue, an L line a lease, an A line
        an ack above the committed offset; synced, then renamed over the old one."""
        self.write()
        tmp = self.path + ".tmp"
        lines = []
        for (key, qid), st in states.items():
            k = key.decode()
            lines.append(f"C {k} {qid} {st.committed}\n")
            lines.extend(f"A {k} {qid} {o}\n" for o in sorted(st.acked))
            lines.extend(f"L {k} {qid} {o} {le.attempt} {le.deadline_ms} {le.nonce}\n" for o, le in sorted(st.leases.items()))
        with open(tmp, "w", encoding="ascii") as f:
            f.writelines(lines)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dfd = os.open(os.path.dirname(self.path), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        os.close(self.fd)
        self.open()
        self.dirty = False

    def close(self) -> None:
        if self.fd >= 0:
            self.write()
            self.sync()
            os.close(self.fd)
            self.fd = -1
