"""The producer side of the writer's rings: what reader processes (and tools, tests, benchmarks)
use to append messages.

A ``RingClient`` claims one ring slot (an flock on ``<store>/run/slot-<i>.lock``, released by the
kernel if the process dies), encodes each message as a complete stored record (store/message.py)
with placeholders the writer fills in, and pushes whole slabs of requests.  ``put`` waits for the
results; ``submit`` returns a ``Ticket`` whose numpy result arrays fill in as replies arrive, so a
caller keeps many slabs in flight and reads results per slab, not per message.  ``wait_flushed`` blocks
until the flusher has the bytes on disk (SYNC_FLUSH replies).

Single-threaded by design: one RingClient per process (or per event loop).
"""
from __future__ import annotations

import fcntl
import functools
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rocketbox.shm import protocol as P
from rocketbox.shm.layout import C, S
from rocketbox.shm.tables import TopicIndex
from rocketbox.store import message

EPOCH_SHIFT = 40
SLAB_SLACK = 256           # a slab's head and a request row, beside its records, in one ring entry
LOST = "writer restarted; outcome unknown"


class NoFreeSlot(Exception):
    pass


@dataclass
class PutRequest:
    """One client request: a single message, or a batch (several bodies) for one topic/queue."""
    topic: str
    queue_id: int
    bodies: list                         # list of bytes
    properties: list                     # one per body: dict[str, str], or the encoded string
    flag: int | list = 0                 # user flag: one for all bodies, or one per body
    sys_flag: int = 0
    born_ts: int = 0
    born_host: tuple = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_offset: int = 0
    wait: bool = True                    # WAIT_STORE_MSG_OK


@dataclass
class PutResult:
    status: int
    queue_id: int = -1
    queue_offset: int = -1
    phys_offsets: list = field(default_factory=list)
    end_offset: int = -1
    store_ts: int = 0
    remark: str = ""

    @property
    def ok(self) -> bool:
        return self.status == P.SUCCESS


class Ticket:
    """The results of one ``submit``: the writer's RESULT rows of the requests that were sent and
    each record's physical offset, as numpy arrays filled in slab by slab as replies arrive.
    ``status`` -1 marks a request not answered yet."""

    def __init__(self, arr: np.ndarray, sizes: np.ndarray, refused: dict):
        self.results = np.zeros(len(arr), P.RESULT)
        self.results["status"] = -1
        self.phys = np.full(len(sizes), -1, dtype=np.int64)
        self.counts = arr["count"].astype(np.int64)       # records of each request, in order
        self.refused, self.missing = refused, 0
        self.remark = ""

    @property
    def done(self) -> bool:
        return self.missing == 0

    def fill(self, req0: int, rec0: int, n_requests: int, res: list | None, phys: list | None) -> None:
        """One slab's reply: RESULT tuples and physical offsets (``res`` None: lost, the writer
        restarted before answering it)."""
        if res is None:
            self.results["status"][req0:req0 + n_requests] = P.SYSTEM_ERROR
            self.remark = LOST
        else:
            assert phys is not None                 # (a reply has both)
            self.results[req0:req0 + len(res)] = res
            self.phys[rec0:rec0 + len(phys)] = phys
        self.missing -= 1

    def put_results(self) -> list[PutResult]:
        """One PutResult per submitted request, refusals at their positions."""
        res = self.results
        out, sent, i = [], iter(zip(res["status"].tolist(), res["queue_id"].tolist(), res["queue_offset"].tolist(),
                                    res["end_offset"].tolist(), res["store_ts"].tolist(), self.counts.tolist())), 0
        plist = self.phys.tolist()
        for pos in range(len(self.results) + len(self.refused)):
            if pos in self.refused:
                out.append(self.refused[pos])
                continue
            status, qid, qoff, end, ts, count = next(sent)
            out.append(PutResult(status, qid, qoff, plist[i:i + count] if status == P.SUCCESS else [], end, ts,
                                 self.remark if status != P.SUCCESS else ""))
            i += count
        return out


class RingClient:
    def __init__(self, cfg, shared):
        self.cfg, self.sh = cfg, shared
        self.slot = -1
        self.lock_fd = -1
        self.seq = 0
        # first req_id of a slab -> its callback(RESULT rows, phys list), (None, None) when lost
        self.in_flight: dict[int, Callable[[list | None, list | None], None]] = {}
        self.topic_replies: dict[int, PutResult | None] = {}
        self.replicas: list[tuple[int, int, int]] = []   # REPLICA_RESULTs read: (req_id, status, written)
        self.awaiting: dict[int, int] = {}          # slab's first req_id or topic rid -> ring position past it
        self.store_ip, self.store_port, _v6 = message.pack_host((cfg.brokerIP1, cfg.listenPort))
        self.templates: dict[tuple, message.RecordTemplate] = {}     # see _template
        self.topics = TopicIndex(shared.views, shared.control)

    # ------------------------------------------------------------ slot
    def open(self) -> "RingClient":
        os.makedirs(self.cfg.run_dir, exist_ok=True)
        for i in range(self.sh.g.max_slots):
            fd = os.open(os.path.join(self.cfg.run_dir, f"slot-{i}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.slot, self.lock_fd = i, fd
            break
        else:
            raise NoFreeSlot(f"all {self.sh.g.max_slots} ring slots are taken (see ringSlots)")
        row = self.sh.slots[self.slot]
        row[S.FLUSH_WAIT] = 0
        row[S.DISPATCH_WAIT] = 0
        row[S.CLAIM_EPOCH] += 1
        row[S.OWNER_PID] = os.getpid()
        self.epoch = int(row[S.CLAIM_EPOCH]) & 0xFFFFFF
        self.writer_epoch = int(self.sh.control[C.WRITER_EPOCH])
        self.requests = self.sh.request_rings[self.slot]
        self.responses = self.sh.response_rings[self.slot]
        self.waker = self.sh.slot_wakers[self.slot]
        self.responses.skip_all()            # whatever a dead previous owner left unread
        return self

    def close(self) -> None:
        if self.lock_fd >= 0:
            self.sh.slots[self.slot, S.OWNER_PID] = 0
            self.sh.slots[self.slot, S.FLUSH_WAIT] = 0
            os.close(self.lock_fd)
            self.lock_fd = -1

    def _reserve_ids(self, n: int) -> int:
        """The first of ``n`` new request ids: (claim epoch << 40) | sequence."""
        first = (self.epoch << EPOCH_SHIFT) + self.seq + 1
        self.seq += n
        return first

    def _next_ids(self, n: int) -> np.ndarray:
        return self._reserve_ids(n) + np.arange(n, dtype=np.uint64)

    # ------------------------------------------------------------ encode
    def encode(self, reqs: list[PutRequest]):
        """-> (request array, record sizes, record bytes, {position: PutResult} for refusals)."""
        rows, sizes, chunks, refused = [], [], [], {}
        for pos, r in enumerate(reqs):
            try:
                message.check_topic(r.topic)
                tidx = self.topics.lookup(r.topic)
                if tidx is None:
                    raise message.MessageRejected(P.TOPIC_NOT_EXIST, f"topic[{r.topic}] not exist, apply first please!")
                if not 0 <= r.queue_id < self.topics.queue_nums(tidx):
                    raise message.MessageRejected(P.SYSTEM_ERROR, f"queueId[{r.queue_id}] is illegal, topic {r.topic}")
                flags = r.flag if isinstance(r.flag, list) else [r.flag] * len(r.bodies)
                props = [(p if isinstance(p, str) else message.encode_properties(p)).encode() for p in r.properties]
                recs = self.records(r.topic.encode(), r.queue_id, r.sys_flag, r.bodies, props, flags,
                                    r.born_ts or int(time.time() * 1000), r.born_host, r.reconsume_times,
                                    r.prepared_offset)
            except message.MessageRejected as e:
                refused[pos] = PutResult(e.code, remark=e.remark)
                continue
            rows.append(self.row(tidx, r.queue_id, r.sys_flag, r.born_host, len(recs.sizes), r.wait))
            sizes += recs.sizes
            chunks += recs.parts
        arr = np.array(rows, dtype=P.REQUEST) if rows else np.zeros(0, P.REQUEST)
        return arr, np.array(sizes, dtype="<u4"), b"".join(chunks), refused

    def records(self, topic: bytes, queue_id: int, sys_flag: int, bodies: list, properties: list[bytes],
                flags: list[int], born_ts: int, born_host: tuple, reconsume_times: int = 0,
                prepared_offset: int = 0) -> message.Records:
        """One request's stored records (store/message.py), placeholders for what the writer
        assigns; MessageRejected (MESSAGE_ILLEGAL) for sizes RocketMQ refuses."""
        max_body = self.cfg.maxMessageSize
        if not bodies:
            raise message.MessageRejected(P.MESSAGE_ILLEGAL, "request without messages")
        if len(bodies) > 1 and sum(len(b) for b in bodies) > max_body:
            raise message.MessageRejected(P.MESSAGE_ILLEGAL, f"batch body size exceeded maxMessageSize {max_body}")
        t, out = self._template((topic, queue_id, sys_flag, born_host, reconsume_times, prepared_offset)), \
            message.Records([], [])
        for body, pbytes, flag in zip(bodies, properties, flags, strict=True):
            message.check_sizes(len(body), len(pbytes), max_body)
            t.add(out, born_ts, body, pbytes, flag)
        return self._fits(out)

    def record(self, topic: bytes, queue_id: int, sys_flag: int, body, props: bytes, flag: int, born_ts: int,
               born_host: tuple, reconsume_times: int = 0) -> message.Records:
        """``records`` of one message (a single send): the same bytes without the lists."""
        if len(body) > self.cfg.maxMessageSize or len(props) > message.PROPERTIES_MAX_LEN:
            message.check_sizes(len(body), len(props), self.cfg.maxMessageSize)
        key = (topic, queue_id, sys_flag, born_host, reconsume_times, 0)
        t = self.templates.get(key) or self._template(key)
        out = message.Records([], [])
        t.add(out, born_ts, body, props, flag)
        return out if out.sizes[0] + 4 + SLAB_SLACK <= self.requests.max_entry else self._fits(out)

    def batch_records(self, topic: bytes, queue_id: int, sys_flag: int, batch: bytes, batch_props: bytes,
                      born_ts: int, born_host: tuple, reconsume_times: int = 0) -> message.Records:
        """``records`` of a client's batch body (SEND_BATCH_MESSAGE), parsed and encoded in one pass."""
        return self._fits(message.encode_batch_records(
            batch, batch_props, self.cfg.maxMessageSize,
            self._template((topic, queue_id, sys_flag, born_host, reconsume_times, 0)), born_ts))

    def _template(self, key: tuple) -> message.RecordTemplate:
        """The record template of ``key`` = (topic, queue id, sysflag, born host, reconsume times,
        prepared offset), kept: a producer sends to a few queues from one host."""
        topic, queue_id, sys_flag, born_host, reconsume_times, prepared_offset = key
        t = self.templates.get(key)
        if t is None:
            if len(self.templates) >= 4096:
                self.templates.clear()
            born_ip, born_port, _ = message.pack_host(born_host)
            t = self.templates[key] = message.RecordTemplate(
                topic, queue_id, sys_flag=sys_flag, born_ip=born_ip, born_port=born_port, store_ip=self.store_ip,
                store_port=self.store_port, reconsume_times=reconsume_times, prepared_offset=prepared_offset)
        return t

    def _fits(self, recs: message.Records) -> message.Records:
        if sum(recs.sizes) + 4 * len(recs.sizes) + SLAB_SLACK > self.requests.max_entry:
            raise message.MessageRejected(P.MESSAGE_ILLEGAL, "batch too large for one append")
        return recs

    @staticmethod
    def row(tidx: int, queue_id: int, sys_flag: int, born_host: tuple, count: int, wait: bool) -> tuple:
        """The request's P.REQUEST row (req_id filled in when its slab is pushed)."""
        if ":" in born_host[0]:                 # an IPv6 address (pack_host's test, without parsing)
            sys_flag |= message.BORNHOST_V6
        return (0, tidx, queue_id, sys_flag, count, P.FLAG_WAIT if wait else 0, 0)

    # ------------------------------------------------------------ submit / collect
    def submit(self, reqs: list[PutRequest]) -> "Ticket":
        """Encode and push the requests (as few slabs as fit); the ticket fills in as replies come."""
        arr, sizes, records, refused = self.encode(reqs)
        return self.submit_encoded(arr, sizes, records, refused)

    def submit_encoded(self, arr: np.ndarray, sizes: np.ndarray, records, refused=None) -> "Ticket":
        """Push already encoded requests (``arr['req_id']`` is filled in here), split into as many
        slabs as the ring's entry size and the reply ring need."""
        t = Ticket(arr, sizes, refused or {})
        budget = self.requests.max_entry - 64
        max_records = self.responses.capacity // (4 * (P.RESULT.itemsize + 8))   # so the reply fits
        counts = arr["count"].astype(np.int64)
        rec_end = np.cumsum(sizes.astype(np.int64))
        req_last = np.cumsum(counts) - 1
        req_bytes_end = rec_end[req_last] + np.arange(1, len(arr) + 1) * P.REQUEST.itemsize + (req_last + 1) * 4
        lo_req, lo_rec, lo_byte, base = 0, 0, 0, 0
        while lo_req < len(arr):
            hi_req = int(min(np.searchsorted(req_bytes_end, base + budget, side="right"),
                             np.searchsorted(req_last, lo_rec + max_records - 1, side="right")))
            if hi_req <= lo_req:
                raise ValueError(f"request of {int(req_bytes_end[lo_req] - base)} bytes does not fit one ring entry")
            hi_rec = int(req_last[hi_req - 1]) + 1
            hi_byte = int(rec_end[hi_rec - 1])
            t.missing += 1
            self.push_slab(arr[lo_req:hi_req], sizes[lo_rec:hi_rec], memoryview(records)[lo_byte:hi_byte],
                           functools.partial(t.fill, lo_req, lo_rec, hi_req - lo_req))
            base = int(req_bytes_end[hi_req - 1])
            lo_req, lo_rec, lo_byte = hi_req, hi_rec, hi_byte
        return t

    def push_slab(self, arr: np.ndarray, sizes: np.ndarray, records, answered=None) -> "Ticket | None":
        """One slab as one ring entry, as it is (a broken producer's slab too: tests use this).
        Its reply goes to ``answered(results, phys)`` (both None if the writer restarted without
        answering), or to a new ticket, returned."""
        ticket = None
        if answered is None:
            ticket = Ticket(arr, sizes, {})
            ticket.missing = 1 if len(arr) else 0
            answered = functools.partial(ticket.fill, 0, 0, len(arr))
        arr["req_id"] = self._next_ids(len(arr))
        end = self._push(P.PUT, P.slab_parts(arr, sizes, records, time.monotonic_ns()))
        if len(arr):                        # (waited for once pushed: a refused push leaves nothing behind)
            rid = int(arr["req_id"][0])
            self.in_flight[rid] = answered
            self.awaiting[rid] = end
        return ticket

    def push_rows(self, rows: list[tuple], sizes: list[int], records: bytes, answered, block: bool = True,
                  half_offset: int | None = None) -> bool:
        """``push_slab`` from Python rows (P.REQUEST tuples, req_id 0) and record sizes: the same
        ring entry built with ``struct``, cheaper than numpy for the few requests of a loop turn.
        ``block`` False: False at once, and nothing pushed, when the ring has no room for it.
        ``half_offset``: a TX_END entry, the records that end the transaction of that half."""
        rid = self._reserve_ids(len(rows))
        rows = [(rid + i, *r[1:]) for i, r in enumerate(rows)]
        parts = P.slab_bytes(rows, sizes, records, time.monotonic_ns())
        kind = P.PUT
        if half_offset is not None:
            kind, parts = P.TX_END, [np.array([half_offset], P.TX_END_HEAD).tobytes(), *parts]
        end = self._push(kind, parts) if block else self._try_push(kind, parts)
        if end is None:
            return False
        self.awaiting[rid] = end
        self.in_flight[rid] = answered
        return True

    def _push(self, kind: int, parts) -> int:
        """One ring entry, waiting (and reading replies) while the ring is full; wakes the writer.
        -> the ring position just past the entry."""
        while (end := self._try_push(kind, parts)) is None:
            self._wait_for_room()
        return end

    def _try_push(self, kind: int, parts) -> int | None:
        """``_push`` without waiting: None, and nothing pushed, when the ring has no room."""
        if not self.requests.try_push(kind, parts):
            return None
        end = self.requests.write_pos
        self.sh.writer_waker.post()
        return end

    def _wait_for_room(self) -> None:
        self.sh.writer_waker.post()
        self.poll()
        self.waker.wait(0.05)
        self.check_writer()

    def check_writer(self) -> None:
        """A new writer epoch.  An entry an earlier writer took from the ring without answering has
        an unknown outcome (it may be stored); one still in the ring when the new writer started is
        the new writer's to answer, as usual, and so is one it took since (a topic is answered only
        after its entry is released, once topics.json has it)."""
        epoch = int(self.sh.control[C.WRITER_EPOCH])
        if epoch == self.writer_epoch:
            return
        self.writer_epoch = epoch
        taken = int(self.sh.slots[self.slot, S.EPOCH_READ_POS])
        self.poll()
        for rid in [rid for rid, end in self.awaiting.items() if end <= taken]:
            del self.awaiting[rid]
            if rid in self.in_flight:
                self.in_flight.pop(rid)(None, None)
            elif rid in self.topic_replies:
                self.topic_replies[rid] = PutResult(P.SYSTEM_ERROR, remark=LOST)

    def poll(self) -> int:
        """Read every reply that has arrived; returns how many ring entries were answered."""
        got = 0
        for kind, payload, after in self.responses.entries():
            if kind == P.PUT_RESULT:
                mv = memoryview(payload)        # struct and a cast: cheaper than numpy views here
                nq, nr = P.RESULT_HEAD_S.unpack_from(mv, 0)
                at = P.RESULT_HEAD.itemsize
                end = at + nq * P.RESULT.itemsize
                rows = list(P.RESULT_S.iter_unpack(mv[at:end]))
                rid = rows[0][P.RESULT_AT.req_id] if rows else -1     # the slab's first request
                self.awaiting.pop(rid, None)
                answered = self.in_flight.pop(rid, None)
                if answered is not None:
                    answered(rows, mv[end:end + nr * 8].cast("q").tolist())     # native = "<i8" (ring.py)
                    got += 1
            elif kind == P.REPLICA_RESULT:
                r = payload[:P.REPLICA_RES.itemsize].view(P.REPLICA_RES)[0]
                self.awaiting.pop(int(r["req_id"]), None)
                self.replicas.append((int(r["req_id"]), int(r["status"]), int(r["written"])))
                got += 1
            elif kind == P.TOPIC_RESULT:
                r = payload[:P.TOPIC_RES.itemsize].view(P.TOPIC_RES)[0]
                rid = int(r["req_id"])
                self.awaiting.pop(rid, None)
                if rid in self.topic_replies:
                    self.topic_replies[rid] = PutResult(int(r["status"]), queue_id=int(r["topic_idx"]))
                    got += 1
            self.responses.release(after)
        return got

    def wait(self, ticket: "Ticket", timeout: float = 10.0) -> "Ticket":
        """Block until every slab of ``ticket`` is answered."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            self.check_writer()
            if ticket.done:
                return ticket
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply from the writer within {timeout} s")
            self.waker.wait(min(left, 0.5))

    def collect(self, ticket: "Ticket", timeout: float = 10.0) -> list[PutResult]:
        """The result of each request of ``ticket``, in submission order."""
        return self.wait(ticket, timeout).put_results()

    def put(self, reqs: list[PutRequest], timeout: float = 10.0) -> list[PutResult]:
        return self.collect(self.submit(reqs), timeout)

    def end_transaction(self, half_offset: int, rows: list[tuple], sizes: list[int], records: bytes,
                        timeout: float = 10.0) -> list[int]:
        """``push_rows`` of a TX_END entry, blocking -> each request's status (P.TX_ENDED: the
        transaction was ended before; -1 each: lost with a restarted writer). TimeoutError when
        the writer does not answer within ``timeout``."""
        got: list = []
        self.push_rows(rows, sizes, records, lambda res, _phys, *_: got.append(res), half_offset=half_offset)
        deadline = time.monotonic() + timeout
        while not got:
            self.poll()
            self.check_writer()
            left = deadline - time.monotonic()
            if left <= 0 and not got:
                raise TimeoutError(f"no reply from the writer within {timeout} s")
            if not got:
                self.waker.wait(min(max(left, 0.0), 0.5))
        return [-1] * len(rows) if got[0] is None else [r[P.RESULT_AT.status] for r in got[0]]

    # ------------------------------------------------------------ flush / topics
    def wait_flushed(self, end_offset: int, timeout_s: float) -> bool:
        """Block until the CommitLog is flushed through ``end_offset``; False on time-out."""
        ctl, row = self.sh.control, self.sh.slots[self.slot]
        deadline = time.monotonic() + timeout_s
        while ctl[C.FLUSHED] < end_offset:
            row[S.FLUSH_WAIT] = end_offset
            self.sh.flusher_waker.post()
            left = deadline - time.monotonic()
            if left <= 0:
                row[S.FLUSH_WAIT] = 0
                return False
            if ctl[C.FLUSHED] >= end_offset:
                break
            self.waker.wait(min(left, 0.5))
        row[S.FLUSH_WAIT] = 0
        return True

    def push_topic(self, tc: dict) -> int:
        """Send a TopicConfig to the writer; its reply lands in ``topic_replies[rid]``."""
        rid = self._reserve_ids(1)
        head = np.zeros(1, P.TOPIC_REQ)
        head[0] = (rid,)
        self.topic_replies[rid] = None
        self.awaiting[rid] = self._push(P.TOPIC, [head, json.dumps(tc).encode()])
        return rid

    def create_topic(self, name: str, queue_nums: int, perm: int = 6, timeout: float = 10.0, **extra) -> int:
        """Create or update a topic through the writer; returns the response code."""
        from rocketbox.store.topicconfig import topic_config
        rid = self.push_topic(topic_config(name, queue_nums, queue_nums, perm, **extra))
        deadline = time.monotonic() + timeout
        while self.topic_replies[rid] is None:
            self.poll()
            self.check_writer()
            left = deadline - time.monotonic()
            if self.topic_replies[rid] is None:
                if left <= 0:
                    del self.topic_replies[rid]
                    raise TimeoutError(f"no reply from the writer within {timeout} s")
                self.waker.wait(min(left, 0.5))
        reply = self.topic_replies.pop(rid)
        assert reply is not None
        return reply.status

    # ------------------------------------------------------------ a slave's replica
    def try_push_replica(self, offset: int, parts: list, kind: int = P.REPLICA) -> int | None:
        """A REPLICA entry: the master's CommitLog bytes from ``offset``, the bytes-likes ``parts``
        one after the other (a slave's replicator), or a CUT entry (no parts), without waiting;
        -> its request id (its result lands in ``replicas``), None when the ring has no room now."""
        rid = self._reserve_ids(1)
        head = np.zeros(1, P.REPLICA_HEAD)
        head[0] = (rid, offset)
        end = self._try_push(kind, [head, *parts])
        if end is None:
            return None
        self.awaiting[rid] = end
        return rid

    # ------------------------------------------------------------ consumer groups (never answered)
    def push_offsets(self, rows: np.ndarray) -> int:
        """Commit consumer offsets (P.OFFSET_UPDATE rows); returns the ring position just past the
        entry: the writer has applied them once the ring's read position reaches it."""
        return self._push(P.OFFSET, [rows])

    def push_group(self, sg: dict) -> None:
        self._push(P.GROUP, [json.dumps(sg).encode()])
