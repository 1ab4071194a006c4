import os

import numpy as np
import pytest

from rocketbox.store.consumequeue import ENTRY, ENTRY_SIZE, ConsumeQueue, file_size_for
from rocketbox.store.errors import CorruptData, FileSizeMismatch


def arr(*vals):
    return np.array(vals, dtype=np.int64)


def test_entry_bytes_are_big_endian_golden(tmp_path):
    cq = ConsumeQueue(str(tmp_path), "T", 0, file_size_for(100), True).load()
    cq.put(0, arr(1234), arr(200), arr(2598919))
    raw = open(tmp_path / "consumequeue/T/0/00000000000000000000", "rb").read()
    assert len(raw) == 100
    assert raw[:20] == (1234).to_bytes(8, "big") + (200).to_bytes(4, "big") + (2598919).to_bytes(8, "big")
    cq.close()


def test_roll_reopen_and_idempotent_put(tmp_path):
    size = file_size_for(95)          # rounded up to 100 bytes = 5 entries per file
    assert size == 100
    cq = ConsumeQueue(str(tmp_path), "T", 1, size, True).load()
    phys = np.arange(12, dtype=np.int64) * 100
    cq.put(0, phys, np.full(12, 100), np.arange(12))
    assert cq.max_offset == 12 and cq.max_phys == 1200
    assert sorted(os.listdir(tmp_path / "consumequeue/T/1")) == [
        "00000000000000000000", "00000000000000000100", "00000000000000000200"]
    assert cq.put(5, phys[5:], np.full(7, 100), np.arange(5, 12)) == 0   # re-dispatch skipped
    more = np.arange(10, 14, dtype=np.int64) * 100                        # half present, half new
    assert cq.put(10, more, np.full(4, 100), np.arange(10, 14)) == 2
    assert cq.max_offset == 14 and cq.max_phys == 1400
    assert cq.put(13, [1300, 1400], [100, 100], [13, 14]) == 1            # lists (the dispatcher's few path)
    assert cq.max_offset == 15 and cq.max_phys == 1500
    cq.close()
    cq = ConsumeQueue(str(tmp_path), "T", 1, size, False).load()
    assert cq.max_offset == 15 and cq.max_phys == 1500
    assert cq.entries(11, 4)["phys"].tolist() == [1100, 1200, 1300, 1400]
    e = cq.entries(5, 3)
    assert e["phys"].tolist() == [500, 600, 700] and e["tags"].tolist() == [5, 6, 7]
    cq.close()


def test_a_few_entries_at_a_time_write_the_bytes_of_one_block(tmp_path):
    """Runs of up to FEW_ENTRIES go through struct, longer ones through numpy: same file bytes,
    across a file roll, from arrays and from lists."""
    from rocketbox.store.consumequeue import FEW_ENTRIES
    size = file_size_for(20 * 25)
    phys = np.arange(60, dtype=np.int64) * 1000 + 7
    sizes, tags = np.arange(60) % 900 + 100, -(np.arange(60) * 2**35)          # tags: wide and negative
    one = ConsumeQueue(str(tmp_path / "one"), "T", 0, size, True).load()
    one.put(0, phys, sizes, tags)
    few = ConsumeQueue(str(tmp_path / "few"), "T", 0, size, True).load()
    at = 0
    for n in (1, FEW_ENTRIES, 3, FEW_ENTRIES + 5, 2, 40):                       # the last run crosses files
        n = min(n, 60 - at)
        args = (phys[at:at + n], sizes[at:at + n], tags[at:at + n])
        few.put(at, *(a.tolist() for a in args) if n % 2 else args)
        at += n
    assert at == 60 and few.max_offset == one.max_offset == 60 and few.max_phys == one.max_phys
    for cq in (one, few):
        cq.close()
    names = sorted(os.listdir(tmp_path / "one/consumequeue/T/0"))
    assert len(names) == 3 and names == sorted(os.listdir(tmp_path / "few/consumequeue/T/0"))
    for name in names:
        assert (open(tmp_path / "few/consumequeue/T/0" / name, "rb").read()
                == open(tmp_path / "one/consumequeue/T/0" / name, "rb").read()), name


def test_gap_is_corruption(tmp_path):
    cq = ConsumeQueue(str(tmp_path), "T", 0, 100, True).load()
    cq.put(0, arr(0), arr(10), arr(0))
    with pytest.raises(CorruptData):
        cq.put(3, arr(100), arr(10), arr(0))
    cq.close()


def test_truncate_phys(tmp_path):
    cq = ConsumeQueue(str(tmp_path), "T", 0, 100, True).load()
    cq.put(0, np.arange(12, dtype=np.int64) * 100, np.full(12, 100), np.zeros(12, np.int64))
    cq.truncate_phys(650)
    assert cq.max_offset == 7 and cq.max_phys == 700
    cq.close()
    cq = ConsumeQueue(str(tmp_path), "T", 0, 100, True).load()
    assert cq.max_offset == 7
    assert len(os.listdir(tmp_path / "consumequeue/T/0")) == 2
    cq.close()


def test_wrong_file_size_refuses_to_load(tmp_path):
    d = tmp_path / "consumequeue/T/0"
    d.mkdir(parents=True)
    (d / "00000000000000000000").write_bytes(b"\0" * 60)         # (the newest short one: being made)
    (d / "00000000000000000100").write_bytes(b"\0" * 100)
    with pytest.raises(FileSizeMismatch):
        ConsumeQueue(str(tmp_path), "T", 0, 100, False).load()


def test_garbage_tail_ends_recovery(tmp_path):
    cq = ConsumeQueue(str(tmp_path), "T", 0, 100, True).load()
    cq.put(0, arr(0, 100), arr(100, 100), arr(0, 0))
    cq.close()
    p = tmp_path / "consumequeue/T/0/00000000000000000000"
    raw = bytearray(p.read_bytes())
    raw[40:60] = (-5).to_bytes(8, "big", signed=True) + bytes(12)
    p.write_bytes(bytes(raw))
    cq = ConsumeQueue(str(tmp_path), "T", 0, 100, False).load()
    assert cq.max_offset == 2 and cq.entries(0, 5).dtype == ENTRY
    cq.close()


def _mapped(path) -> int:
    with open("/proc/self/maps") as f:
        return sum(str(path) in line for line in f)


def _open_fds(path) -> int:
    return sum(os.readlink(f"/proc/self/fd/{fd}").startswith(str(path)) for fd in os.listdir("/proc/self/fd")
               if os.path.exists(f"/proc/self/fd/{fd}"))


def test_more_queue_files_than_the_budget_of_open_files_stay_readable_and_writable(tmp_path, monkeypatch):
    """A process holds at most OPEN_FILES.budget consume-queue files mapped and open (the least
    recently used are released and mapped again when used), however many queues it writes and
    reads; every entry is where it was written."""
    from rocketbox.store import consumequeue
    budget = 8
    monkeypatch.setattr(consumequeue.OPEN_FILES, "budget", budget)
    released = consumequeue.OPEN_FILES.released
    cqs = [ConsumeQueue(str(tmp_path), "T", q, 10 * ENTRY_SIZE, True).load() for q in range(40)]
    for rnd in range(3):                                   # 3 x 4 entries: two files of 10 entries per queue
        for q, cq in enumerate(cqs):
            base = (rnd * 40 + q) * 100
            cq.put(cq.max_offset, [base + i for i in range(4)], [10] * 4, [q] * 4)
        # a file: its mapping, and up to two descriptors (mmap's own dup, and the one it is written through)
        assert _mapped(tmp_path) <= budget and _open_fds(tmp_path) <= 2 * budget, (_mapped(tmp_path), _open_fds(tmp_path))
    assert consumequeue.OPEN_FILES.released > released
    readers = [ConsumeQueue(str(tmp_path), "T", q, 10 * ENTRY_SIZE, False).load() for q in range(40)]
    for q in range(40):
        for cq in (cqs[q], readers[q]):
            assert cq.max_offset == 12
            got = [int(p) for off in range(12) for p in cq.entries(off, 1)["phys"]]
            assert got == [(rnd * 40 + q) * 100 + i for rnd in range(3) for i in range(4)], q
    assert _mapped(tmp_path) <= budget and _open_fds(tmp_path) <= 2 * budget
    for cq in cqs + readers:
        cq.close()
    assert _mapped(tmp_path) == 0 and _open_fds(tmp_path) == 0


def test_loading_queues_maps_none_of_their_files_until_a_read_and_then_without_read_ahead(tmp_path):
    """Recovery loads every queue of the store: a load reads each queue's last file up to its first
    invalid entry (pread) and maps nothing; a read maps the file it needs, with MADV_RANDOM (a fault
    on a fresh sparse file would otherwise read ahead 8 MiB of holes: milliseconds per new queue)."""
    from tests.unit.store.test_mappedfile import mappings
    cqs = [ConsumeQueue(str(tmp_path), "T", q, file_size_for(6000), True).load() for q in range(3)]
    for q, cq in enumerate(cqs):
        cq.put(0, arr(q * 100), arr(100), arr(q))
        cq.close()
    loaded = [ConsumeQueue(str(tmp_path), "T", q, file_size_for(6000), False).load() for q in range(3)]
    assert [(cq.max_offset, cq.max_phys) for cq in loaded] == [(1, 100), (1, 200), (1, 300)]
    assert _mapped(tmp_path) == 0 and _open_fds(tmp_path) == 0
    assert loaded[1].entries(0, 1)["phys"].tolist() == [100]
    flags = [fl for fl, _rss in mappings(str(tmp_path / "consumequeue/T/1/00000000000000000000"))]
    assert len(flags) == 1 and "rr" in flags[0] and _mapped(tmp_path) == 1
    for cq in loaded:
        cq.close()


@pytest.mark.parametrize("entries", [0, 1, 203, 204, 205, 5000, 6000])
def test_recovery_reads_up_to_the_first_invalid_entry_across_its_growing_reads(tmp_path, entries):
    """``valid_prefix`` reads a page (204 entries), then twice as much each time: the end is found
    wherever it falls (0, inside the first read, at its edge, past it, at the file's end and into
    the next)."""
    from rocketbox.store.consumequeue import FIRST_READ
    assert FIRST_READ == 204 * ENTRY_SIZE
    per_file = 3000
    cq = ConsumeQueue(str(tmp_path), "T", 0, per_file * ENTRY_SIZE, True).load()
    if entries:
        phys = np.arange(entries, dtype=np.int64) * 50
        cq.put(0, phys, np.full(entries, 50), np.zeros(entries, np.int64))
    cq.close()
    again = ConsumeQueue(str(tmp_path), "T", 0, per_file * ENTRY_SIZE, True).load()
    assert (again.max_offset, again.max_phys) == (entries, entries * 50)
    assert len(again.files.files) == -(-entries // per_file)
    again.close()
