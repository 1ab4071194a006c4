"""The compiled batch record fill (native/records.c) against its Python twin
(store/message.py's py_encode_batch_records): seeded generated batches, plain, oversized, cut and
damaged, through both; the same records byte for byte, or the same refusal."""
from __future__ import annotations

import random

import pytest

from rocketbox.native import compiled
from rocketbox.store import message as m
from rocketbox.store.errors import MessageRejected

pytestmark = pytest.mark.skipif(compiled is None, reason="the compiled hot paths are not built (or "
                                                        "ROCKETBOX_PURE_PYTHON=1): nothing to compare")


def _template(rng: random.Random) -> m.RecordTemplate:
    host = rng.choice([("10.0.0.7", 40001), ("127.0.0.1", 5), ("::1", 9876), ("fe80::1", 1)])
    ip, port, _ = m.pack_host(host)
    return m.RecordTemplate(rng.choice([b"T", b"BenchTopic", b"x" * 127]), rng.randrange(0, 64),
                            sys_flag=rng.choice([0, 1, 4]), born_ip=ip, born_port=port, store_ip=bytes([10, 0, 0, 1]),
                            store_port=10911, reconsume_times=rng.randrange(3), prepared_offset=0)


def _props(rng: random.Random) -> str:
    props = rng.choice(["", "UNIQ_KEY\x01AB12", "TAGS\x01a\x02KEYS\x01k1 k2", "WAIT\x01true\x02", "x\x01" + "y" * 40])
    return props + ("\x02" if props and rng.random() < 0.3 else "")


def _batch(rng: random.Random) -> bytes:
    messages = [(rng.randrange(-5, 5), rng.randbytes(rng.choice([0, 1, 100, 1024, 5000])), _props(rng))
                for _ in range(rng.randrange(0, 12))]
    batch = bytearray(m.encode_client_batch(messages))
    r = rng.random()
    if batch and r < 0.1:
        del batch[rng.randrange(len(batch)):]                    # cut
    elif batch and r < 0.2:
        at = rng.randrange(len(batch))
        batch[at:at + 2] = rng.randbytes(2)                      # a length, a flag or a body byte
    elif r < 0.25:
        batch += rng.randbytes(rng.randrange(1, 30))             # junk after the last message
    elif r < 0.28:
        batch += m.encode_client_batch([(0, b"b", "p" * 32760)])  # properties past 32767 with the request's
    return bytes(batch)


def _outcome(encode, batch: bytes, props: bytes, max_body: int, t: m.RecordTemplate, born_ts: int):
    try:
        recs = encode(batch, props, max_body, t, born_ts)
    except MessageRejected as e:
        return "MessageRejected", e.code, e.remark
    return recs.sizes, b"".join(recs.parts)


@pytest.mark.parametrize("seed", range(30))
def test_a_batchs_records_are_the_same_compiled_and_in_python(seed):
    rng = random.Random(seed)
    taken = 0
    for _ in range(40):
        batch, t = _batch(rng), _template(rng)
        props = rng.choice([b"", b"CLUSTER\x01DefaultCluster", b"WAIT\x01false\x02CLUSTER\x01c"])
        max_body = rng.choice([4 * 1024 * 1024, 6000, 1024, 0])
        born_ts = rng.choice([0, 1795954047982, -1, 2**63 - 1, -2**63])
        got = _outcome(m._compiled_batch_records, batch, props, max_body, t, born_ts)
        taken += type(got[0]) is list
        assert got == _outcome(m.py_encode_batch_records, batch, props, max_body, t, born_ts), (seed, len(batch))
    assert taken > 5


def test_a_stored_batch_record_reads_back_as_sent():
    t = _template(random.Random(1))
    batch = m.encode_client_batch([(3, b"hello", "TAGS\x01a"), (0, b"", "")])
    sizes, data = compiled.batch_records(batch, b"CLUSTER\x01c", b"\x02CLUSTER\x01c", 1024, m.PROPERTIES_MAX_LEN,
                                         t.lead, t.rest, t.topic, t.queue_id, 99, t.fixed, m.crc32)
    first = m.decode_record(data[:sizes[0]])
    assert (first.body, first.flag, first.born_ts, first.topic) == (b"hello", 3, 99, t.topic.decode())
    assert first.properties == {"TAGS": "a", "CLUSTER": "c"} and len(data) == sum(sizes)
