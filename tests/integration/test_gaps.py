"""A gap in the CommitLog stops start-up and never deletes (#49): a file moved away from the middle
of the log (inside recovery's scan window or before it), or a middle file cut short, makes
``appliance start`` exit 2 naming the missing range and the files after it, with every file left as
it was; ``appliance check`` names the same; ``appliance accept-gap`` makes the gap a filler, and the
appliance then serves every acknowledged message outside it, exactly once."""
from __future__ import annotations

import asyncio
import os
import shutil

import pytest

from rocketbox.appliance.check import check
from rocketbox.store.mappedfile import offset_to_name
from tests.integration.harness import read_topic
from tests.integration.test_damage import FILE, _filled


def _store(appliance_factory, n: int = 6000):
    """Five or six CommitLog files of acknowledged messages, stopped gracefully."""
    app, acked, _records = _filled(appliance_factory, n)
    files = sorted(os.listdir(app.cfg.commitlog_dir))
    assert len(files) >= 3, files
    return app, acked, files


def _in_file(rep, start: int) -> set[str]:
    return {body.decode().split("body-")[1] for rows in rep.queues.values() for _q, p, body in rows
            if start <= p < start + FILE}


def test_missing_middle_files_stop_start_up_and_are_served_around_once_accepted(appliance_factory):
    """Two files moved away: one inside recovery's scan window (the last three files after a clean
    stop), one before it, which recovery used not to see at all."""
    app, acked, files = _store(appliance_factory)
    assert len(files) >= 5, files
    before = check(app.cfg)
    assert before.clean, before.problems[:5]
    gone = [files[1], files[-2]]
    lost = _in_file(before, int(gone[0])) | _in_file(before, int(gone[1]))
    sizes = {f: os.path.getsize(os.path.join(app.cfg.commitlog_dir, f)) for f in files if f not in gone}
    for f in gone:
        shutil.move(os.path.join(app.cfg.commitlog_dir, f), os.path.join(app.dir, f))

    with pytest.raises(RuntimeError, match="exited with 2") as e:
        app.start()
    for g in gone:
        after = files[files.index(g) + 1:]
        assert f"CommitLog bytes {int(g)}-{int(g) + FILE} ({FILE} bytes) are missing: no file {g} before {after[0]}; " \
               f"{len([f for f in after if f not in gone])} file(s) after it ({after[0]} .. {files[-1]})" in str(e.value)
    assert "accept-gap" in str(e.value)
    left = sorted(os.listdir(app.cfg.commitlog_dir))
    assert {f: os.path.getsize(os.path.join(app.cfg.commitlog_dir, f)) for f in left} == sizes   # nothing cut
    r = app.cmd("check")
    assert r.returncode == 1 and all(f"PROBLEM CommitLog bytes {int(g)}-" in r.stdout for g in gone), r.stdout

    r = app.cmd("accept-gap")
    assert r.returncode == 0, r.stdout + r.stderr
    assert all(f"ACCEPTING CommitLog bytes {int(g)}-" in r.stdout for g in gone)
    assert app.cmd("accept-gap").stdout.startswith("no gap")
    r = app.cmd("check")
    assert r.returncode == 0 and all(f"ACCEPTED GAP {FILE} bytes at offset {int(g)}" in r.stdout for g in gone), r.stdout
    assert "missing CommitLog bytes" in app.cmd("quarantine").stdout

    app.start()
    got = [m.body.decode().split("body-")[1] for m in asyncio.run(read_topic(app, "TBW102"))]
    assert len(got) == len(set(got))
    assert set(got) == set(acked) - lost and len(got) == len(acked) - len(lost)
    assert app.stop() == 0
    assert check(app.cfg).clean


def test_a_short_middle_file_stops_start_up_and_keeps_its_whole_records_once_accepted(appliance_factory):
    app, acked, files = _store(appliance_factory)
    before = check(app.cfg)
    short = os.path.join(app.cfg.commitlog_dir, files[2])
    cut_at = FILE // 2 + 77                                      # inside a record
    os.truncate(short, cut_at)
    with pytest.raises(RuntimeError, match="exited with 2") as e:
        app.start()
    assert f"CommitLog bytes {int(files[2]) + cut_at}-{int(files[3])} " in str(e.value)
    assert f"file {files[2]} is {cut_at} bytes, not {FILE}" in str(e.value)
    assert os.path.getsize(short) == cut_at
    assert app.cmd("accept-gap").returncode == 0
    app.start()
    got = [m.body.decode().split("body-")[1] for m in asyncio.run(read_topic(app, "TBW102"))]
    kept = {body.decode().split("body-")[1] for rows in before.queues.values() for _q, p, body in rows
            if not int(files[2]) + cut_at - 300 < p < int(files[3])}
    assert len(got) == len(set(got)) and kept <= set(got)
    lost = set(acked) - set(got)
    assert 0 < len(lost) < len(_in_file(before, int(files[2])))     # the file's first half is served
    assert app.stop() == 0
    assert check(app.cfg).clean


def test_files_missing_at_the_end_stop_start_up(appliance_factory):
    app, acked, files = _store(appliance_factory, 2500)
    last = files[-1]
    shutil.move(os.path.join(app.cfg.commitlog_dir, last), os.path.join(app.dir, last))
    with pytest.raises(RuntimeError, match="exited with 2") as e:
        app.start()
    assert "past the last CommitLog file" in str(e.value) and offset_to_name(int(files[-2])) in str(e.value)
    shutil.move(os.path.join(app.dir, last), os.path.join(app.cfg.commitlog_dir, last))   # put back: all there
    app.start()
    got = [m.body.decode().split("body-")[1] for m in asyncio.run(read_topic(app, "TBW102"))]
    assert sorted(got) == sorted(acked)
    assert app.stop() == 0
