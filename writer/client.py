"""The producer side of the writer's rings: what reader processes (and tools, tests, benchmarks)
use to append messages.

A ``RingClient`` claims one ring slot (an flock on ``<store>/run/slot-<i>.lock``, released by the
kernel if the process dies), encodes each message as a complete stored record (store/message.py)
with placeholders the writer fills in, and pushes whole slabs of requests.  ``put`` waits for the
results; ``submit``/``collect`` let a caller keep many slabs in flight.  ``wait_flushed`` blocks
until the flusher has the bytes on disk (SYNC_FLUSH replies).

Single-threaded by design: one RingClient per process (or per event loop).
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass, field

import numpy as np

from shm.layout import C, S
from shm.tables import TopicIndex
from store import message
from writer import protocol as P

EPOCH_SHIFT = 40


class WriterRestarted(Exception):
    """The writer restarted with requests of ours in flight: their outcome is unknown."""


class NoFreeSlot(Exception):
    pass


@dataclass
class PutRequest:
    """One client request: a single message, or a batch (several bodies) for one topic/queue."""
    topic: str
    queue_id: int
    bodies: list                         # list of bytes
    properties: list                     # list of dict[str, str], one per body
    flag: int = 0
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


class RingClient:
    def __init__(self, cfg, shared):
        self.cfg, self.sh = cfg, shared
        self.slot = -1
        self.lock_fd = -1
        self.seq = 0
        self.pending: dict[int, object] = {}       # req_id -> result (None while in flight)
        self.store_ip, self.store_port, _v6 = message.pack_host((cfg.brokerIP1, cfg.listenPort))
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

    def _next_id(self) -> int:
        self.seq += 1
        return (self.epoch << EPOCH_SHIFT) | self.seq

    # ------------------------------------------------------------ encode
    def encode(self, reqs: list[PutRequest]):
        """-> (request array, record sizes, record bytes, {position: PutResult} for refusals)."""
        rows, sizes, chunks, refused = [], [], [], {}
        max_body = self.cfg.maxMessageSize
        for pos, r in enumerate(reqs):
            try:
                message.check_topic(r.topic)
                tidx = self.topics.lookup(r.topic)
                if tidx is None:
                    raise message.MessageRejected(P.TOPIC_NOT_EXIST, f"topic[{r.topic}] not exist, apply first please!")
                if not 0 <= r.queue_id < self.topics.queue_nums(tidx):
                    raise message.MessageRejected(P.SYSTEM_ERROR, f"queueId[{r.queue_id}] is illegal, topic {r.topic}")
                if len(r.bodies) > 1 and sum(len(b) for b in r.bodies) > max_body:
                    raise message.MessageRejected(P.MESSAGE_ILLEGAL, f"batch body size exceeded maxMessageSize {max_body}")
                born_ip, born_port, _ = message.pack_host(r.born_host)
                topic = r.topic.encode()
                recs = []
                for body, props in zip(r.bodies, r.properties, strict=True):
                    pbytes = message.encode_properties(props).encode()
                    message.check_sizes(len(body), len(pbytes), max_body)
                    recs.append(message.encode_record(
                        topic=topic, queue_id=r.queue_id, body=body, properties=pbytes, flag=r.flag,
                        sys_flag=r.sys_flag, born_ts=r.born_ts or int(time.time() * 1000), born_ip=born_ip,
                        born_port=born_port, store_ip=self.store_ip, store_port=self.store_port,
                        reconsume_times=r.reconsume_times, prepared_offset=r.prepared_offset))
                if not recs:
                    raise message.MessageRejected(P.MESSAGE_ILLEGAL, "request without messages")
                if sum(len(x) + 4 for x in recs) + 256 > self.requests.max_entry:
                    raise message.MessageRejected(P.MESSAGE_ILLEGAL, "batch too large for one append")
            except message.MessageRejected as e:
                refused[pos] = PutResult(e.code, remark=e.remark)
                continue
            sys_flag = r.sys_flag | (message.BORNHOST_V6 if len(born_ip) == 16 else 0)
            rows.append((0, tidx, r.queue_id, sys_flag, len(recs), P.FLAG_WAIT if r.wait else 0, 0))
            sizes += [len(x) for x in recs]
            chunks += recs
        arr = np.array(rows, dtype=P.REQUEST) if rows else np.zeros(0, P.REQUEST)
        return arr, np.array(sizes, dtype="<u4"), b"".join(chunks), refused

    # ------------------------------------------------------------ submit / collect
    def submit(self, reqs: list[PutRequest]) -> list:
        """Push the requests as one slab; returns, per request, a req_id to collect or a refusal."""
        arr, sizes, records, refused = self.encode(reqs)
        ids = [None] * len(reqs)
        if len(arr):
            arr["req_id"] = [self._next_id() for _ in range(len(arr))]
            self.submit_encoded(arr, sizes, records)
        it = iter(arr["req_id"].tolist())
        for pos in range(len(reqs)):
            ids[pos] = refused[pos] if pos in refused else next(it)
        return ids

    def submit_encoded(self, arr: np.ndarray, sizes: np.ndarray, records) -> None:
        """Push already encoded requests (``arr['req_id']`` filled in, e.g. from ``new_ids``),
        split into as many slabs as the ring's entry limit needs."""
        for rid in arr["req_id"].tolist():
            self.pending[rid] = None
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
            self._push(P.PUT, P.slab_parts(arr[lo_req:hi_req], sizes[lo_rec:hi_rec], memoryview(records)[lo_byte:hi_byte]))
            base = int(req_bytes_end[hi_req - 1])
            lo_req, lo_rec, lo_byte = hi_req, hi_rec, hi_byte

    def _push(self, kind: int, parts) -> None:
        """One ring entry, waiting (and reading replies) while the ring is full; wakes the writer."""
        while not self.requests.try_push(kind, parts):
            self._wait_for_room()
        self.sh.writer_waker.post()

    def new_ids(self, n: int) -> list[int]:
        return [self._next_id() for _ in range(n)]

    def _wait_for_room(self) -> None:
        self.sh.writer_waker.post()
        self.poll()
        self.waker.wait(0.05)
        self._check_writer()

    def _check_writer(self) -> None:
        if int(self.sh.control[C.WRITER_EPOCH]) != self.writer_epoch:
            self.writer_epoch = int(self.sh.control[C.WRITER_EPOCH])
            lost = [rid for rid, v in self.pending.items() if v is None]
            if lost:
                for rid in lost:
                    self.pending[rid] = PutResult(P.SYSTEM_ERROR, remark="writer restarted; outcome unknown")

    def poll(self) -> int:
        """Read every reply that has arrived; returns how many requests got a result."""
        got = 0
        for kind, payload, after in self.responses.entries():
            if kind == P.PUT_RESULT:
                got += self._read_put_result(payload)
            elif kind == P.TOPIC_RESULT:
                r = payload[:P.TOPIC_RES.itemsize].view(P.TOPIC_RES)[0]
                if int(r["req_id"]) in self.pending:
                    self.pending[int(r["req_id"])] = PutResult(int(r["status"]), queue_id=int(r["topic_idx"]))
                    got += 1
            self.responses.release(after)
        return got

    def _read_put_result(self, payload) -> int:
        head = payload[:P.RESULT_HEAD.itemsize].view(P.RESULT_HEAD)[0]
        nq, nr = int(head["n_requests"]), int(head["n_records"])
        at = P.RESULT_HEAD.itemsize
        res = payload[at:at + nq * P.RESULT.itemsize].view(P.RESULT)
        phys = payload[at + nq * P.RESULT.itemsize: at + nq * P.RESULT.itemsize + nr * 8].view("<i8")
        plist = phys.tolist()
        got, i = 0, 0
        for rid, status, qid, qoff, _p0, end, ts, count, _pad in res.tolist():
            if rid in self.pending:
                self.pending[rid] = PutResult(status, qid, qoff, plist[i:i + count] if status == P.SUCCESS else [], end, ts)
                got += 1
            i += count
        return got

    def collect(self, ids: list, timeout: float = 10.0) -> list[PutResult]:
        """Wait for the results of ``ids`` (as returned by ``submit``)."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            self._check_writer()
            if all(not isinstance(i, int) or self.pending.get(i) is not None for i in ids):
                return [i if not isinstance(i, int) else self.pending.pop(i) for i in ids]
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply from the writer within {timeout} s")
            self.waker.wait(min(left, 0.5))

    def put(self, reqs: list[PutRequest], timeout: float = 10.0) -> list[PutResult]:
        return self.collect(self.submit(reqs), timeout)

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

    def create_topic(self, name: str, queue_nums: int, perm: int = 6, timeout: float = 10.0, **extra) -> int:
        """Create or update a topic through the writer; returns the response code."""
        from writer.topics import topic_config
        tc = topic_config(name, queue_nums, queue_nums, perm, **extra)
        rid = self._next_id()
        head = np.zeros(1, P.TOPIC_REQ)
        head[0] = (rid,)
        self.pending[rid] = None
        self._push(P.TOPIC, [head, json.dumps(tc).encode()])
        return self.collect([rid], timeout)[0].status
