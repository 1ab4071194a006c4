"""The e2e load generator's requests: its lean consume path says what the codec says
(``PullFrames`` gives ``Rocketbox.pull_frame``'s exact bytes, and ``Rocketbox.pulled`` reads pull
replies, split anywhere, as the decoder does), and its sends carry keys of their own per message."""
import re

from bench.e2e import KEYS_PER_QUEUE, QUEUES, PullFrames, Rocketbox
from rocketbox.readers.pull import _ANSWER
from rocketbox.remoting import codec
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.store.message import decode_records, encode_record


def test_pull_frames_are_the_encoded_pull_requests():
    frames = PullFrames()
    for queue_id in (0, 3, 7):
        for offset in (0, 1, 9, 10, 99, 100, 12345, 10 ** 12 - 1, 10 ** 12, 2 ** 63 - 1):
            assert frames(queue_id, offset) == Rocketbox.pull_frame(queue_id, offset), (queue_id, offset)
    assert len(frames.heads) == 3 * len({1, 2, 3, 5, 12, 13, 19})     # one head per queue and digit count


def test_pulled_reads_replies_as_the_decoder_does():
    records = [encode_record(topic=b"T", queue_id=1, body=b"x" * n, properties=b"TAGS\x01a") for n in (0, 5, 1024)]
    reqs = [codec.Decoder().feed(Rocketbox.pull_frame(q, 40))[0] for q in range(3)]
    stream = b"".join([
        _ANSWER.encode(reqs[0], RC.SUCCESS, "FOUND", ("0", "43", "0", "43"), records),
        _ANSWER.encode(reqs[1], RC.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", ("0", "40", "0", "40")),
        _ANSWER.encode(reqs[2], RC.SUCCESS, "FOUND", ("0", "1234567", "7", "1234999"), records[2:]),
    ])
    want = [(r.opaque, r.code, int(r.ext["nextBeginOffset"]), len(decode_records(r.body or b"")))
            for r in codec.Decoder().feed(stream)]
    assert want == [(0, RC.SUCCESS, 43, 3), (1, RC.PULL_NOT_FOUND, 40, 0), (2, RC.SUCCESS, 1234567, 1)]
    for cut in range(0, len(stream) + 1, 97):              # fed in two pieces, cut anywhere
        buf, got = bytearray(stream[:cut]), []
        replies, used = Rocketbox.pulled(buf)
        got += replies
        del buf[:used]
        buf += stream[cut:]
        replies, used = Rocketbox.pulled(buf)
        assert used == len(buf), cut
        assert got + replies == want, cut



def test_send_frames_give_every_message_its_own_keys_queue_by_queue_in_turn():
    for batch in (1, 32):
        frames = Rocketbox.send_frames(b"b" * 100, batch)
        assert len(frames) == QUEUES * KEYS_PER_QUEUE // batch
        uniq, keys = [], []
        for i, (frame, msgs, replies) in enumerate(frames):
            (cmd,) = codec.Decoder().feed(frame)
            assert (msgs, replies, int(cmd.ext["e"])) == (batch, 1, i % QUEUES)
            carried = cmd.body if batch > 1 else cmd.ext["i"].encode()     # a batch: each message's own
            found = re.findall(rb"UNIQ_KEY\x01([0-9A-F]{32})", carried)
            assert len(found) == batch, (batch, i)
            uniq += found
            keys += re.findall(rb"KEYS\x01(k\d+-\d+)", carried)
        assert len(set(uniq)) == len(uniq) == len(set(keys)) == len(keys) == QUEUES * KEYS_PER_QUEUE, batch


def test_json_send_frames_carry_the_same_request_and_their_json_replies_are_read_for_their_code():
    binary, json_ = (Rocketbox.send_frames(b"b" * 100, 1, t)[:40] for t in (codec.ROCKETMQ, codec.JSON))
    replies = []
    for (bframe, *_), (jframe, *_) in zip(binary, json_):
        (b,), (j,) = codec.Decoder().feed(bframe), codec.Decoder().feed(jframe)
        assert (j.serialize_type, b.serialize_type) == (codec.JSON, codec.ROCKETMQ)
        assert (j.code, {**j.ext, "g": ""}, j.body) == (b.code, {**b.ext, "g": ""}, b.body)   # g: born ms
        code = (RC.SUCCESS, RC.SYSTEM_BUSY, RC.SERVICE_NOT_AVAILABLE)[len(replies) % 3]
        replies.append((code, codec.encode(j.response(code, "busy" if code else None, ext={"msgId": "AB"}))))
        replies.append((code, codec.encode(b.response(code, "busy" if code else None, ext={"msgId": "AB"}))))
    stream = b"".join(frame for _code, frame in replies)
    for cut in (0, 1, 9, 300, len(stream) // 2, len(stream)):
        buf = bytearray(stream[:cut])
        got, used = Rocketbox.replies(buf)
        del buf[:used]
        buf += stream[cut:]
        more, used = Rocketbox.replies(buf)
        assert used == len(buf) and got + more == [code for code, _frame in replies], cut
