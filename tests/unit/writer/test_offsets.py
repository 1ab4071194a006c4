"""consumerOffset.json and the shared offset table (writer/groups.py): what is set is what the
file holds, and what a new writer reads back, whether it boots from the file or attaches to the
table a dead writer left."""
import os

import numpy as np

from rocketbox.shm.layout import OFFSET_KEY_BYTES, C
from rocketbox.shm.protocol import OFFSET_UPDATE
from rocketbox.store import configfile
from rocketbox.writer.groups import PERSIST_INTERVAL_S, ConsumerOffsets


class _Cfg:
    def __init__(self, root):
        self.config_dir = str(root)


def _table(root, slots=16):
    views = {"offset_keys": np.zeros(slots, f"S{OFFSET_KEY_BYTES}"), "offset_qids": np.zeros(slots, "<i4"),
             "offset_values": np.zeros(slots, "<i8")}
    return ConsumerOffsets(_Cfg(root), views, np.zeros(64, "<i8")), views


def test_set_persist_load_and_attach_agree(tmp_path):
    first, views = _table(tmp_path)
    for key, qid, offset in ((b"T@g", 0, 5), (b"T@g", 1, 7), ("Ünï@g".encode(), 3, 2 ** 40), (b"T@g", 0, 6)):
        first.set(key, qid, offset)
    want = {"offsetTable": {"T@g": {"0": 6, "1": 7}, "Ünï@g": {"3": 2 ** 40}}}
    assert first.table() == want and int(first.control[C.OFFSET_COUNT]) == 3
    first.close()
    with open(first.path, encoding="utf-8") as f:
        text = f.read()
    # as fastjson writes it: TAB-indented, queue ids (Integer keys) unquoted; read back tolerantly
    assert '\t\t"T@g": {\n\t\t\t0: 6,\n\t\t\t1: 7\n\t\t},' in text and '\t\t\t3: 1099511627776\n' in text, text
    assert configfile.loads_tolerant(text) == want

    booted, _ = _table(tmp_path)                  # a new writer on a new table reads the file
    booted.load()
    assert booted.table() == want and not booted.dirty

    attached = ConsumerOffsets(_Cfg(tmp_path), views, first.control)   # a restarted writer, same table
    attached.attach()
    assert attached.table() == want
    attached.set(b"T@g", 1, 8)
    attached.set(b"U@h", 0, 1)
    assert attached.table() == {"offsetTable": {"T@g": {"0": 6, "1": 8}, "Ünï@g": {"3": 2 ** 40}, "U@h": {"0": 1}}}


def test_queue_ids_are_unquoted_and_nothing_else_whatever_the_group_is_called(tmp_path):
    offsets, _ = _table(tmp_path)
    odd = 'T@a": 1,\n\t\t\t"2'                  # a group name that looks like the file's own syntax
    offsets.set(odd.encode(), 0, 9)
    offsets.set(b"T@g", 12, -1)
    offsets.close()
    with open(offsets.path, encoding="utf-8") as f:
        text = f.read()
    assert '\t\t\t0: 9\n' in text and '\t\t\t12: -1\n' in text and '"T@a\\": 1,\\n\\t\\t\\t\\"2": {' in text, text
    assert configfile.loads_tolerant(text) == {"offsetTable": {odd: {"0": 9}, "T@g": {"12": -1}}}


def test_a_full_table_drops_only_the_new_offsets_it_cannot_take(tmp_path, caplog):
    offsets, _ = _table(tmp_path, slots=2)
    rows = np.array([(b"T@g", 0, 0, 1), (b"T@g", 1, 0, 2), (b"T@g", 2, 0, 3), (b"T@g", 0, 0, 4)], OFFSET_UPDATE)
    offsets.apply(rows)                      # queue 2 has no slot left; the update after it is kept
    assert offsets.table() == {"offsetTable": {"T@g": {"0": 4, "1": 2}}}
    assert ("1 new consumer offsets dropped (their commits are answered 'table is full'): the shared offset table "
            "is full (2 offsets") in caplog.text


def test_the_periodic_write_runs_in_its_own_thread_and_a_failed_one_is_tried_again(tmp_path, caplog):
    """Every PERSIST_INTERVAL_S the file is written by a thread (the writer's loop goes on); a
    write that fails is logged, and the next period writes what the table holds then."""
    offsets, _ = _table(tmp_path)
    offsets.set(b"T@g", 0, 5)
    offsets.persist()                                     # not due yet: nothing
    assert offsets.file is None and offsets.dirty
    os.mkdir(offsets.path + ".tmp")                       # where the write goes first: it fails
    offsets.persisted_at -= PERSIST_INTERVAL_S
    offsets.persist()
    assert offsets.file is not None and not offsets.dirty  # under way in its own thread
    offsets.file.wait_idle()
    assert not os.path.exists(offsets.path)
    offsets.persist()                                     # the failure seen by the loop: due again
    assert offsets.dirty and [r.getMessage()[:60] for r in caplog.records if r.levelname == "ERROR"] == [
        f"cannot write {offsets.path}: [Errno 21] Is a directory"[:60]]
    os.rmdir(offsets.path + ".tmp")
    offsets.set(b"T@g", 1, 7)
    offsets.persist()                                     # not due yet: nothing
    offsets.file.wait_idle()
    assert not os.path.exists(offsets.path)
    offsets.persisted_at -= PERSIST_INTERVAL_S
    offsets.persist()
    offsets.file.wait_idle()
    with open(offsets.path, encoding="utf-8") as f:
        assert configfile.loads_tolerant(f.read()) == {"offsetTable": {"T@g": {"0": 5, "1": 7}}}
    offsets.set(b"T@g", 0, 6)                             # after the last write: the stop's
    offsets.close()
    with open(offsets.path, encoding="utf-8") as f:
        assert configfile.loads_tolerant(f.read()) == {"offsetTable": {"T@g": {"0": 6, "1": 7}}}
    assert not offsets.dirty and not offsets.file.thread.is_alive()
