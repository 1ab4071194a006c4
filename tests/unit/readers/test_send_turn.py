"""A loop turn's sends, taken together (readers/send.py): whatever goes wrong while they are
appended, every send of the turn is answered, none left to time out; and what a stored send is
answered with."""
import asyncio

from bench.e2e import Rocketbox
from bench.paths import _Transport
from rocketbox.net.server import Connection, RemotingServer
from rocketbox.readers.send import SendProcessor
from rocketbox.remoting import codec
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm.context import ReaderContext
from rocketbox.store import message
from rocketbox.writer.topics import topic_config
from tests.unit.writer.rig import running_store, small_config


class _Kept(_Transport):
    """The connection's writes, kept whole and decoded."""

    def __init__(self):
        super().__init__()
        self.out = codec.Decoder()
        self.raw, self.replies = [], []

    def write(self, data) -> None:
        super().write(data)
        self.raw.append(bytes(data))
        self.replies += self.out.feed(data)

    def writelines(self, pieces) -> None:
        super().writelines(pieces)
        self.raw.append(b"".join(pieces))
        self.replies += self.out.feed(self.raw[-1])


def _serve(tmp_path, check) -> None:
    """``await check(writer, link, conn, out)``: a reader connection whose sends go to a real
    writer (stepped by the check) of a store holding bench.e2e's topic."""
    cfg = small_config(tmp_path / "store", "turn")
    with running_store(cfg) as (sh, w, _d, _c):
        w.topics.upsert(topic_config("BenchE2E", 8, 8))

        async def main():
            ctx = ReaderContext(cfg, sh).open_context()
            link = ctx.link
            try:
                conn = Connection(RemotingServer("t", SendProcessor(ctx).handlers()))
                conn.head, out = None, _Kept()
                conn.connection_made(out)
                await check(w, link, conn, out)
            finally:
                ctx.close_context()

        asyncio.run(main())


async def _turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_failing_append_answers_every_send_of_the_turn(tmp_path):
    frames = [f for f, _n, _r in Rocketbox.send_frames(b"x" * 100, 1)][:3]

    async def check(w, link, conn, out):
        real, link.append = link.append, _boom
        conn.data_received(b"".join(frames))
        await _turns()
        assert [(r.code, r.opaque) for r in out.replies] == [(RC.SYSTEM_ERROR, f.opaque) for f in
                                                             codec.Decoder().feed(b"".join(frames))]
        assert all(r.remark == "RuntimeError: boom" for r in out.replies), out.replies
        assert link.ring.requests.entries() == [] and not link.busy    # nothing went to the writer
        link.append, out.replies = real, []
        conn.data_received(b"".join(frames))           # the next turn is served as usual
        await _turns()
        assert w.step()
        await asyncio.sleep(0.05)
        assert [r.code for r in out.replies] == [RC.SUCCESS] * 3
        assert sorted(int(r.ext["queueId"]) for r in out.replies) == [0, 1, 2]

    _serve(tmp_path, check)


def _boom(*_args):
    raise RuntimeError("boom")


def _answered_in_both_dialects(tmp_path, frame: bytes, check_replies) -> None:
    """Send ``frame`` (a ROCKETMQ header) and the same request with a JSON header, store both,
    and ``check_replies(request, replies)``; then each reply must be exactly ``codec.encode`` of
    RocketMQ's response, in its request's serialization."""
    (req,) = codec.Decoder().feed(frame)
    as_json = codec.Command(req.code, req.ext, req.body, opaque=req.opaque + 1, serialize_type=codec.JSON)

    async def check(w, _link, conn, out):
        conn.data_received(frame + codec.encode(as_json))
        await _turns()
        assert w.step()
        await asyncio.sleep(0.05)
        assert [(r.code, r.opaque, r.serialize_type) for r in out.replies] == [
            (RC.SUCCESS, req.opaque, codec.ROCKETMQ), (RC.SUCCESS, req.opaque + 1, codec.JSON)]
        check_replies(req, out.replies)
        for sent, got in zip((req, as_json), out.replies):
            assert codec.encode(sent.response(RC.SUCCESS, None, ext=dict(got.ext))) in b"".join(out.raw)

    _serve(tmp_path, check)


def test_a_stored_send_is_answered_with_the_bytes_of_its_response_in_either_serialization(tmp_path):
    """The reply of a stored single send, formatted straight to bytes in either serialization, is
    exactly ``codec.encode`` of RocketMQ's response, msgId naming the record's offset."""
    (frame, _n, _r), = Rocketbox.send_frames(b"y" * 300, 1)[:1]

    def check_replies(req, replies):
        offsets = [message.parse_offset_msg_id(r.ext["msgId"])[2] for r in replies]
        assert offsets[0] == 0 and offsets[1] > 0                 # the second record follows the first
        assert [(r.ext["queueId"], r.ext["queueOffset"]) for r in replies] == [(req.ext["e"], "0"),
                                                                               (req.ext["e"], "1")]

    _answered_in_both_dialects(tmp_path, frame, check_replies)


def test_a_stored_batch_is_answered_with_every_msg_id_in_either_serialization(tmp_path):
    (frame, n, _r), = Rocketbox.send_frames(b"z" * 200, 4)[:1]

    def check_replies(_req, replies):
        offsets = [[message.parse_offset_msg_id(i)[2] for i in r.ext["msgId"].split(",")] for r in replies]
        assert [len(o) for o in offsets] == [n, n] and offsets[0] == sorted(offsets[0]) < offsets[1]
        assert [r.ext["queueOffset"] for r in replies] == ["0", str(n)]

    _answered_in_both_dialects(tmp_path, frame, check_replies)
