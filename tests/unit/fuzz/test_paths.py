"""Differential fuzzing of the store's two paths (#49): the same seeded messages and batches
(``tests/fuzzgen.py``) go through a writer and dispatcher forced onto their vector paths and through
ones forced onto their scalar paths.  The writers must answer every request alike and lay down the
same records (byte for byte but the store time); the dispatcher's consume queues and IndexFiles,
and those of a scalar re-dispatch of the same CommitLog, must be the same bytes; every accepted
message reads back as sent.  A failure names the seed and the one message that makes it fail alone.

``FUZZ_SEEDS`` / ``FUZZ_MESSAGES`` widen a run; the slow lane's run is tests/integration/test_fuzz_store.py.
"""
from __future__ import annotations

import contextlib
import os

import pytest

from rocketbox.appliance.inprocess import running_store, small_config
from rocketbox.shm.layout import C
from rocketbox.shm.ringclient import PutRequest
from rocketbox.store import message
from rocketbox.store.mappedfile import MappedFileQueue
from rocketbox.writer import append
from rocketbox.writer.topics import topic_config
from tests import fuzzgen

SEEDS = [int(s) for s in os.environ.get("FUZZ_SEEDS", "1,2,3").split(",")]
MESSAGES = int(os.environ.get("FUZZ_MESSAGES", "1500"))
STORE = dict(mappedFileSizeCommitLog=4 << 20, maxMessageSize=1 << 20, ringRequestBytes=8 << 20,
             ringResponseBytes=1 << 20, maxHashSlotNum=200, maxIndexNum=2000)


def _requests(sends) -> list[PutRequest]:
    return [PutRequest(s.topic, s.queue_id, [m.body for m in s.msgs], [m.properties() for m in s.msgs],
                       flag=[m.flag for m in s.msgs], born_ts=1_700_000_000_000 + i)
            for i, s in enumerate(sends)]


@contextlib.contextmanager
def _stored(cfg, sends, vector: bool, monkeypatch):
    """The sends through a store on one path (both topics made first), still open:
    yields (shared state, each request's result, the dispatcher)."""
    with running_store(cfg) as (sh, w, d, c):
        for name in ("Fz0", "Fz1"):
            w.topics.upsert(topic_config(name, 4, 4))
        d.few_records = 0 if vector else 10**9
        monkeypatch.setattr(append, "FEW_REQUESTS", 0 if vector else 10**6)
        reqs, results = _requests(sends), []
        for i in range(0, len(reqs), 16):
            ticket = c.submit(reqs[i:i + 16])
            while w.step():
                pass
            results += c.collect(ticket, 5)
            while d.step():
                pass
        yield sh, results, d


def _run(root, tag: str, sends, vector: bool, monkeypatch):
    """The sends through one store on one path; -> (each request's result, the store's config, what
    went wrong in the dispatcher: a pass that failed and was redone, records it contained)."""
    cfg = small_config(root, tag, **STORE)
    with _stored(cfg, sends, vector, monkeypatch) as (sh, results, d):
        problems = [f"{'vector' if vector else 'scalar'} dispatcher: {d.redone} passes failed (redone record by "
                    f"record), {int(sh.control[C.DISPATCH_UNINDEXED])} records unindexed, "
                    f"{int(sh.control[C.DISPATCH_UNQUEUED])} unqueued"] \
            if d.redone or sh.control[C.DISPATCH_UNINDEXED] or sh.control[C.DISPATCH_UNQUEUED] else []
    return results, cfg, problems


def _masked(cfg) -> list[bytes]:
    """Every CommitLog file's bytes with each record's STORETIMESTAMP zeroed."""
    cl = MappedFileQueue(cfg.commitlog_dir, cfg.mappedFileSizeCommitLog, False).load()
    out = []
    try:
        for mf in cl.files:
            data, at = bytearray(mf.mm[:]), 0
            while at + 8 <= len(data):
                total, magic = message.HEAD.unpack_from(data, at)
                if magic != message.MAGIC:
                    break
                ts_at = at + message.store_ts_at(int.from_bytes(data[at + message.SYSFLAG_AT:at + message.SYSFLAG_AT + 4],
                                                                "big", signed=True))
                data[ts_at:ts_at + 8] = bytes(8)
                at += total
            out.append(bytes(data))
    finally:
        cl.close()
    return out


def _differences(tmp_path, sends, monkeypatch, stats: dict | None = None) -> list[str]:
    """What differs between the two paths for these sends (empty: nothing); ``stats`` gets the
    messages accepted and refused."""
    import uuid
    run = uuid.uuid4().hex[:8]
    a_res, a, out = _run(tmp_path / f"v{run}", f"fv{run[:4]}", sends, True, monkeypatch)
    b_res, b, more = _run(tmp_path / f"s{run}", f"fs{run[:4]}", sends, False, monkeypatch)
    out += more
    for i, (x, y) in enumerate(zip(a_res, b_res)):
        if (x.status, x.queue_offset, x.phys_offsets, x.remark) != (y.status, y.queue_offset, y.phys_offsets, y.remark):
            out.append(f"request {i}: vector {x.status} {x.queue_offset} {x.phys_offsets[:2]} {x.remark!r}, "
                       f"scalar {y.status} {y.queue_offset} {y.phys_offsets[:2]} {y.remark!r}")
    if not out and _masked(a) != _masked(b):
        out.append("the CommitLogs differ (store times aside)")
    if stats is not None:
        stats["accepted"] = sum(len(s.msgs) for s, r in zip(sends, a_res) if r.ok)
        stats["refused"] = sum(len(s.msgs) for s, r in zip(sends, a_res) if not r.ok)
        stats["codes"] = sorted({r.status for r in a_res})
    if not out:
        out += fuzzgen.redispatch_differences(a, str(tmp_path / f"c{run}"), f"fc{run[:4]}", **STORE)
    return out


def _minimal(tmp_path, sends, monkeypatch) -> str:
    """The one message that fails alone (a send at a time, then a message at a time)."""
    for s in sends:
        if _differences(tmp_path, [s], monkeypatch):
            for m in s.msgs:
                one = fuzzgen.Send(s.topic, s.queue_id, [m], s.batch)
                if _differences(tmp_path, [one], monkeypatch):
                    return f"{'batch' if s.batch else 'single'} to {s.topic}/{s.queue_id}: {fuzzgen.describe(m)}"
            return f"a batch of {len(s.msgs)} to {s.topic}/{s.queue_id} (no message fails alone)"
    return "no single send fails alone"


@pytest.mark.parametrize("seed", SEEDS)
def test_vector_and_scalar_paths_store_and_dispatch_the_same_bytes(tmp_path, monkeypatch, seed):
    sends = fuzzgen.generate(seed, MESSAGES, max_body=1 << 16, max_batch=256)
    print(f"fuzz seed {seed}: {len(sends)} sends, {sum(len(s.msgs) for s in sends)} messages")
    diff = _differences(tmp_path, sends, monkeypatch, stats := {})
    print(f"fuzz seed {seed}: vector and scalar agree on {stats}")
    assert stats["accepted"] > 0.7 * MESSAGES
    assert not diff, f"seed {seed}: {diff[:3]}; minimal: {_minimal(tmp_path, sends, monkeypatch)}"


def test_every_accepted_message_reads_back_as_sent_and_every_refusal_stores_nothing(tmp_path, monkeypatch):
    from rocketbox.store.view import StoreView
    sends = fuzzgen.generate(SEEDS[0], MESSAGES, max_body=1 << 16)
    sends += [fuzzgen.Send("Fz0", 1, [fuzzgen.Msg(b"x", [("note", "L" * 40000)])], False),     # too long: refused
              fuzzgen.Send("Fz1", 2, [fuzzgen.Msg(bytes((1 << 20) + 1))], False)]
    cfg = small_config(tmp_path / "rb", "frb", **STORE)
    with _stored(cfg, sends, True, monkeypatch) as (sh, results, d):
        assert d.redone == 0
        view = StoreView(cfg, sh).open()
        accepted = refused = 0
        for s, r in zip(sends, results):
            if not r.ok:
                refused += len(s.msgs)
                assert r.status != 0 and r.remark, (r.status, r.remark)
                continue
            for k, (m, phys) in enumerate(zip(s.msgs, r.phys_offsets)):
                rec = message.decode_record(bytes(view.record(phys)))
                where = f"{fuzzgen.describe(m)} at {phys}"
                assert (rec.topic, rec.queue_id, rec.queue_offset) == (s.topic, s.queue_id, r.queue_offset + k), where
                assert rec.body == m.body and rec.flag == m.flag, where
                stored = bytes(view.record(phys))
                assert m.properties().encode() in stored, where          # the properties as the client sent them
                accepted += 1
        entries = sum(len(view.entries(t, q, 0, 10**6)) for t in ("Fz0", "Fz1") for q in range(4))
        view.close()
    print(f"{accepted} accepted, {refused} refused")
    assert entries == accepted and accepted > 0.7 * MESSAGES and refused >= 2
