"""The HA stream's sans-IO parts: the master's reports, and the slave's check that what arrives
is a CommitLog (records and file-end fillers), however the stream is cut into chunks."""
from __future__ import annotations

import random

import pytest

from rocketbox.replicator import protocol as HA
from rocketbox.store import message

FILE = 64 * 1024


def commitlog(rng: random.Random, files: int) -> bytes:
    """``files`` CommitLog files of records, each file's tail a BLANK filler, as a writer lays them."""
    out = bytearray()
    while len(out) < files * FILE:
        rec = message.encode_record(topic=b"T", queue_id=0, body=rng.randbytes(rng.randrange(0, 3000)),
                                    properties=b"KEYS\x01k")
        room = FILE - len(out) % FILE
        if len(rec) + message.END_FILE_MIN_BLANK > room:
            out += message.BLANK.pack(room, message.BLANK_MAGIC) + bytes(room - 8)
            continue
        out += rec
    return bytes(out[:files * FILE])


@pytest.mark.parametrize("seed", range(5))
def test_records_accepts_a_commitlog_cut_anywhere(seed):
    rng = random.Random(seed)
    log = commitlog(rng, 3)
    start = rng.randrange(0, 200)                     # a slave that had a few bytes already (mid-record)
    records = HA.Records(0, FILE)
    records.feed(0, log[:start])
    at = start
    while at < len(log):
        n = min(len(log) - at, rng.choice([1, 3, 7, 8, 100, 4096, 32768]))
        records.feed(at, log[at:at + n])
        at += n
    assert records.next == len(log) and records.carry == b""


@pytest.mark.parametrize("seed", range(5))
def test_records_refuses_junk_at_the_record_it_starts(seed):
    rng = random.Random(seed)
    log = bytearray(commitlog(rng, 1))
    starts, at = [], 0
    while at < FILE and message.HEAD.unpack_from(log, at)[1] == message.MAGIC:
        starts.append(at)
        at += message.HEAD.unpack_from(log, at)[0]
    bad = rng.choice(starts[1:])
    log[bad + 4:bad + 8] = b"\xde\xad\xbe\xef"
    records = HA.Records(0, FILE)
    with pytest.raises(HA.BadStream, match=f"no record at offset {bad} "):
        for at in range(0, FILE, 1000):
            records.feed(at, bytes(log[at:at + 1000]))


def test_a_record_may_not_cross_its_file_end():
    rec = message.encode_record(topic=b"T", queue_id=0, body=bytes(500), properties=b"")
    records = HA.Records(FILE - 100, FILE)
    with pytest.raises(HA.BadStream):
        records.feed(FILE - 100, rec)


def test_the_master_takes_the_last_whole_report():
    reports = HA.Reports()
    assert reports.feed(HA.REPORT.pack(5)[:3]) is None
    assert reports.feed(HA.REPORT.pack(5)[3:] + HA.REPORT.pack(9) + HA.REPORT.pack(12)[:2]) == 9
    assert reports.feed(HA.REPORT.pack(12)[2:]) == 12


@pytest.mark.parametrize("seed", range(6))
def test_the_inbox_gives_every_frame_whole_however_the_bytes_arrive(seed):
    """Frames read where they landed: cut anywhere by the socket, read from a buffer that fills
    (the socket waits), moves a frame not all here yet to its front, and grows for a frame
    larger than itself; each frame's bytes as sent, heartbeats included."""
    rng = random.Random(seed)
    sent, at = [], 0
    for _ in range(300):
        size = rng.choice([0, rng.randrange(1, 3000), rng.randrange(3000, 40000)])
        sent.append((at, rng.randbytes(size)))
        at += size
    sent.append((at, rng.randbytes(70000)))                   # larger than the inbox
    stream = b"".join(b"".join(bytes(p) for p in HA.chunk(o, d)) for o, d in sent)
    inbox, got, pos = HA.Inbox(1 << 30, capacity=32768), [], 0
    while pos < len(stream) or inbox.start < inbox.end:
        space = inbox.space()
        n = min(len(space), rng.randrange(1, 20000), len(stream) - pos)
        space[:n] = stream[pos:pos + n]
        inbox.received(n)
        pos += n
        got += [(o, bytes(v)) for o, v in inbox.frames()]
        if rng.random() < 0.7 or not len(inbox.space()):      # (the slave consumes after its pushes)
            inbox.consumed()
        if pos == len(stream) and not n:
            inbox.consumed()
            if inbox.start == inbox.end:
                break
    assert got == sent


def test_the_inbox_refuses_a_frame_no_master_sends():
    inbox = HA.Inbox(1000, capacity=4096)
    inbox.space()[:12] = b"".join(bytes(p) for p in HA.chunk(0, b""))[:8] + (1001).to_bytes(4, "big")
    inbox.received(12)
    with pytest.raises(HA.BadStream, match="1001 bytes"):
        inbox.frames()
