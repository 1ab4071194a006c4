"""WriterLink against an in-process writer: a slab pushed at the end of a loop turn, the next one
held (and growing) while the writer works on it, pushed as one ring entry when the writer's answer
wakes the loop through the slot's pipe; every waiter answered once, in order."""
import asyncio

import numpy as np

from rocketbox.readers.pull import PullProcessor
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm.context import ReaderContext
from rocketbox.shm.layout import C, S
from rocketbox.shm.ringclient import PutRequest, RingClient
from rocketbox.shm.writerlink import OVERLOAD
from rocketbox.store import message
from rocketbox.store.javahash import string_hash
from rocketbox.writer.topics import topic_config
from tests.unit.writer.rig import running_store, small_config


def _with_link(tmp_path, tag: str, test, **settings) -> None:
    """Run ``await test(link, w)`` on a WriterLink over an in-process store (writer ``w``)."""
    cfg = small_config(tmp_path / "store", tag, **settings)
    with running_store(cfg) as (sh, w, _d, _c):
        async def main():
            ctx = ReaderContext(cfg, sh).open_context()
            try:
                await test(ctx.link, w)
            finally:
                ctx.close_context()
        asyncio.run(main())


def test_a_slab_waits_while_the_writer_works_on_the_last_one(tmp_path):
    async def test(link, w):
        got = []
        tidx, host = link.topics.lookup("TBW102"), ("127.0.0.1", 5555)

        def send(i):
            recs = link.ring.records(b"TBW102", 0, 0, [b"m%d" % i], [b""], [0], 1, host)
            link.append([RingClient.row(tidx, 0, 0, host, 1, False)], recs.sizes, recs.parts,
                        lambda first, n, res, phys, failure: got.extend((i, r[1], r[3]) for r in res))

        def in_ring():
            return len(link.ring.requests.entries())

        send(0)
        await asyncio.sleep(0)            # end of the loop turn: the idle writer gets it
        assert in_ring() == 1 and link.slab is None
        send(1)
        await asyncio.sleep(0)
        send(2)
        await asyncio.sleep(0)            # the writer has not taken slab 0: these wait
        assert in_ring() == 1 and len(link.slab.rows) == 2
        assert w.step()                   # answers slab 0 and posts the slot's pipe
        await asyncio.sleep(0.05)
        assert got == [(0, 0, 0)]
        assert in_ring() == 1 and link.slab is None    # the held two went as one entry
        assert w.step()
        await asyncio.sleep(0.05)
        assert got == [(0, 0, 0), (1, 0, 1), (2, 0, 2)] and not link.busy
    _with_link(tmp_path, "link", test)


def test_requests_that_do_not_fit_one_slab_go_in_several_whole(tmp_path):
    """One append of seven requests (one a batch of three) where a slab holds three single ones:
    whole requests per slab (the batch alone), the waiter told which requests each answer covers,
    queue offsets dense, every record where its answer says."""
    async def test(link, w):
        tidx, host = link.topics.lookup("TBW102"), ("127.0.0.1", 5555)
        rows, sizes, parts, bodies = [], [], [], [[b"a" * 100], [b"b" * 100], [b"c" * 100, b"d" * 100, b"e" * 100],
                                                 [b"f" * 100], [b"g" * 100], [b"h" * 100], [b"i" * 100]]
        for msgs in bodies:
            recs = link.ring.records(b"TBW102", 0, 0, msgs, [b""] * len(msgs), [0] * len(msgs), 1, host)
            rows.append(RingClient.row(tidx, 0, 0, host, len(msgs), False))
            sizes += recs.sizes
            parts += recs.parts
        link.slab_budget = 3 * (sizes[0] + 4 + 64)          # three requests of one record, with room to spare
        calls = []
        link.append(rows, sizes, parts, lambda first, n, res, phys, failure: calls.append((first, n, res, phys)))
        assert len(link.ring.requests.entries()) == 3 and len(link.slab.rows) == 1   # the last, held
        await asyncio.sleep(0)
        while w.step():
            link.on_wake()
            await asyncio.sleep(0)
        assert [(first, n) for first, n, _res, _phys in calls] == [(0, 2), (2, 1), (3, 3), (6, 1)]
        assert [r[3] for _f, _n, res, _p in calls for r in res] == [0, 1, 2, 5, 6, 7, 8]   # the batch: 2, 3, 4
        phys = [p for _f, _n, _r, ps in calls for p in ps]
        mf = w.commitlog.file_for(0)
        got = [message.decode_records(bytes(mf.view[p:p + s]))[0].body for p, s in zip(phys, sizes)]
        assert got == [b for msgs in bodies for b in msgs]
    _with_link(tmp_path, "split", test)


def test_a_slab_that_cannot_be_pushed_fails_every_request_in_it_with_the_reason(tmp_path):
    async def test(link, w):
        tidx, host = link.topics.lookup("TBW102"), ("127.0.0.1", 5555)
        link.slab_budget = 1 << 30                       # past the ring's own entry limit
        calls = []
        for body in (b"small", b"x" * link.ring.requests.max_entry):
            rec = message.encode_record(topic=b"TBW102", queue_id=0, body=body, properties=b"")
            link.append([RingClient.row(tidx, 0, 0, host, 1, False)] * 2, [len(rec)] * 2, [rec, rec],
                        lambda first, n, res, phys, failure: calls.append((first, n, res, phys, failure)))
        await asyncio.sleep(0)
        assert [c[:4] for c in calls] == [(0, 2, None, None)] * 2
        assert all(c[4][0] == RC.SYSTEM_ERROR and "exceeds the ring's limit" in c[4][1] for c in calls)
        assert link.ring.requests.entries() == [] and not w.step() and not link.busy
    _with_link(tmp_path, "nopush", test)


def _stored(w, d, c, topic: str, queue: int, props: list[dict]) -> None:
    """One request of ``len(props)`` messages to ``topic``'s ``queue``, appended by the
    in-process writer ``w`` and dispatched by ``d`` (``c``: the ring client)."""
    ticket = c.submit([PutRequest(topic, queue, [b"m"] * len(props), props)])
    assert w.step() and c.collect(ticket, 1)[0].ok and d.step()


def test_held_pulls_end_once_each_when_their_queue_grows_or_their_time_is_up(tmp_path):
    cfg = small_config(tmp_path / "store", "polls")
    with running_store(cfg) as (sh, w, d, c):
        w.topics.upsert(topic_config("Grow", 2, 2))

        def put(queue):
            _stored(w, d, c, "Grow", queue, [{}])

        async def main():
            ctx = ReaderContext(cfg, sh).open_context()
            pulls = PullProcessor(ctx)
            ended = []

            def hold(name, queue, timeout_s):
                pulls.polls.hold("Grow", queue, 0, None, timeout_s, lambda grew: ended.append((name, grew)))

            def broken(grew):
                raise RuntimeError("a broken callback")
            try:
                hold("q0", 0, 1)
                hold("q1-short", 1, 0.05)
                pulls.polls.hold("Grow", 0, 0, None, 1, broken)
                hold("q1", 1, 1)
                assert sh.slots[ctx.slot, S.DISPATCH_WAIT] == 1 and ended == []
                await asyncio.sleep(0.15)
                assert ended == [("q1-short", False)]              # its time-out, nothing else
                put(0)                                             # queue 0 grows
                pulls.settle()                                     # the dispatcher's post, or the tick
                assert ended == [("q1-short", False), ("q0", True)]   # the broken one did not stop it
                assert sh.slots[ctx.slot, S.DISPATCH_WAIT] == 1   # q1 still held
                put(1)
                pulls.settle()
                assert ended[-1] == ("q1", True) and len(ended) == 3
                assert len(pulls.polls) == 0 and sh.slots[ctx.slot, S.DISPATCH_WAIT] == 0
                await asyncio.sleep(1.1)                           # no timer fires for an ended hold
                assert len(ended) == 3
            finally:
                ctx.close_context()
        asyncio.run(main())


def test_a_queue_that_grows_ends_only_the_holds_it_has_grown_past(tmp_path):
    cfg = small_config(tmp_path / "store", "polls2")
    with running_store(cfg) as (sh, w, d, c):
        w.topics.upsert(topic_config("Grow", 2, 2))

        def put(queue, n=1):
            _stored(w, d, c, "Grow", queue, [{}] * n)

        async def main():
            ctx = ReaderContext(cfg, sh).open_context()
            pulls = PullProcessor(ctx)
            ended = []

            def hold(offset, queue=0):
                pulls.polls.hold("Grow", queue, offset, None, 5, lambda grew: ended.append((queue, offset, grew)))
            try:
                put(0)                                          # queue 0's max offset: 1
                hold(0)                                         # already past: ended at once
                assert ended == [(0, 0, True)]
                for offset in (3, 1, 2):
                    hold(offset)
                hold(0, queue=1)
                assert len(pulls.polls) == 4
                put(0)                                          # max 2: past the hold at 1 only
                pulls.settle()
                assert ended[1:] == [(0, 1, True)]
                assert pulls.polls.want[ctx.view.queues.slot("Grow", 0)] == 2
                put(0, 2)                                       # max 4: past 2 and 3
                pulls.settle()
                assert sorted(ended[2:]) == [(0, 2, True), (0, 3, True)]
                assert len(pulls.polls) == 1 and sh.slots[ctx.slot, S.DISPATCH_WAIT] == 1
                put(1)                                          # queue 1's first message: its slot is new
                pulls.settle()
                assert ended[-1] == (1, 0, True) and len(ended) == 5
                assert len(pulls.polls) == 0 and sh.slots[ctx.slot, S.DISPATCH_WAIT] == 0
                assert (pulls.polls.want == np.iinfo(np.int64).max).all()
            finally:
                ctx.close_context()
        asyncio.run(main())


def test_a_filtered_hold_is_woken_only_by_a_tag_it_takes(tmp_path):
    """As RocketMQ's notifyMessageArriving: messages of other tags leave the pull held (its scan
    mark moved past them), one of its tags ends it; an unfiltered hold on the queue ends at once."""
    cfg = small_config(tmp_path / "store", "polls3")
    with running_store(cfg) as (sh, w, d, c):
        w.topics.upsert(topic_config("Tags", 1, 1))

        def put(*tags):
            _stored(w, d, c, "Tags", 0, [{"TAGS": t} for t in tags])

        async def main():
            ctx = ReaderContext(cfg, sh).open_context()
            pulls = PullProcessor(ctx)
            ended = []
            try:
                put("TagA")                                     # queue end: 1
                pulls.polls.hold("Tags", 0, 1, (string_hash("TagA"), string_hash("TagC")), 5,
                                lambda grew: ended.append(("AC", grew)))
                pulls.polls.hold("Tags", 0, 1, None, 5, lambda grew: ended.append(("all", grew)))
                put("TagB", "TagB")
                pulls.settle()
                assert ended == [("all", True)]                 # the filtered one is still held...
                slot = ctx.view.queues.slot("Tags", 0)
                assert len(pulls.polls) == 1 and pulls.polls.want[slot] == 3    # ...past the two TagBs
                put("TagC")
                pulls.settle()
                assert ended == [("all", True), ("AC", True)] and len(pulls.polls) == 0
                put("TagB")                                     # held at 4 (TagB only to come): time-out
                pulls.polls.hold("Tags", 0, 4, (string_hash("TagA"),), 0.05, lambda grew: ended.append(("A", grew)))
                assert len(pulls.polls) == 1 and pulls.polls.want[slot] == 5
                await asyncio.sleep(0.15)
                assert ended[-1] == ("A", False) and len(ended) == 3
            finally:
                ctx.close_context()
        asyncio.run(main())


def _sends(link, count: int, size: int, calls: list, name: str) -> None:
    """``count`` single-record requests of a ``size``-byte body, appended together; the waiter's
    calls go to ``calls`` as (name, first, n, results or None, failure)."""
    tidx, host = link.topics.lookup("TBW102"), ("127.0.0.1", 5555)
    sizes, parts = [], []
    for i in range(count):
        recs = link.ring.record(b"TBW102", 0, 0, b"%c" % (65 + i % 26) * size, b"", 0, 1, host)
        sizes += recs.sizes
        parts += recs.parts
    link.append([RingClient.row(tidx, 0, 0, host, 1, False)] * count, sizes, parts,
                lambda first, n, res, phys, failure: calls.append((name, first, n, res, failure)))


def test_a_stalled_writer_gets_sends_held_behind_it_answered_busy_and_then_refused(tmp_path):
    """The writer is not stepped: the first slab stays in the ring, the next is held, and after
    waitTimeMillsInSendQueue it is answered SYSTEM_BUSY (TIMEOUT_CLEAN_QUEUE) and never pushed;
    after osPageCacheBusyTimeOutMills the link says the writer is stalled (sends are refused)."""
    async def test(link, w):
        calls = []
        _sends(link, 1, 100, calls, "first")
        await asyncio.sleep(0)                           # pushed: the writer was idle
        _sends(link, 3, 100, calls, "held")
        await asyncio.sleep(0)                           # held: the writer has not taken the first
        assert calls == [] and len(link.ring.requests.entries()) == 1 and not link.stalled()
        await asyncio.sleep(0.08)
        assert len(calls) == 1 and calls[0][:4] == ("held", 0, 3, None), calls
        code, remark = calls[0][4]
        assert code == RC.SYSTEM_BUSY and remark.startswith(
            "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: "), remark
        assert int(remark.split("period in queue: ")[1].split("ms")[0]) >= 50 and remark.endswith("size of queue: 3")
        assert link.slab is None and len(link.ring.requests.entries()) == 1     # nothing of it pushed
        assert not link.stalled()
        await asyncio.sleep(0.15)
        assert link.stalled()                            # 200 ms without the first slab finished
        assert w.step()                                  # the writer comes back
        link.on_wake()
        assert [c[:3] for c in calls[1:]] == [("first", 0, 1)] and calls[1][3][0][1] == 0
        assert not link.stalled() and not w.step()      # the held sends were never stored
    _with_link(tmp_path, "stall", test, waitTimeMillsInSendQueue=50, osPageCacheBusyTimeOutMills=200)


def test_a_slab_the_full_ring_cannot_take_is_answered_busy_at_once_not_waited_for(tmp_path):
    """With the writer stalled, a held slab that outgrows its budget is pushed anyway; once the
    ring has no room, the next is answered SYSTEM_BUSY (OVERLOAD) instead of blocking the loop."""
    async def test(link, w):
        calls = []
        per = (link.ring.requests.max_entry * 6 // 10) // 4000          # requests in ~0.6 of an entry
        _sends(link, per, 3900, calls, "a")
        await asyncio.sleep(0)                                          # pushed (writer idle)
        for name in "bcde":
            _sends(link, per, 3900, calls, name)                        # each pushes the one held before
        assert [c[0] for c in calls] == ["d"] and calls[0][3] is None and calls[0][4] == OVERLOAD, calls
        assert len(link.ring.requests.entries()) == 3                   # a, b, c; e is held
        assert link.slab is not None and len(link.slab.rows) == per
        while w.step():
            link.on_wake()
        await asyncio.sleep(0)                                          # e's turn ends, the writer idle: pushed
        while w.step():
            link.on_wake()
        assert [c[0] for c in calls if c[3] is not None] == ["a", "b", "c", "e"]
        assert all(r[1] == 0 for c in calls if c[3] for r in c[3]), calls
        written = int(w.sh.control[C.WRITTEN])                              # and only theirs are stored
        bodies = [r.body[:1] for r in message.decode_records(bytes(w.commitlog.file_for(0).view[:written]))]
        assert len(bodies) == 4 * per and bodies[:3] == [b"A", b"B", b"C"]
    _with_link(tmp_path, "full", test, waitTimeMillsInSendQueue=10_000, maxMessageSize=8192,
               mappedFileSizeCommitLog=4 << 20)
