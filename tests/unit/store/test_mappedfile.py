"""How files are mapped and written, read from the kernel's own record of each mapping
(/proc/self/smaps: VmFlags, where "rr" is VM_RAND_READ, what MADV_RANDOM sets, and Rss, the pages
the mapping holds)."""

import os
import re
import subprocess
import sys
import textwrap

import pytest

from rocketbox.store.errors import FileSizeMismatch
from rocketbox.store.indexfile import IndexFile
from rocketbox.store.mappedfile import MappedFile, MappedFileQueue, map_failure

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

SIZE = 1 << 20


def mappings(path: str) -> list[tuple[set[str], int]]:
    """(VmFlags, Rss in KiB) of each mapping of ``path`` in this process."""
    found, current, rss = [], False, 0
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:      # a mapping's first line
                current = len(head) == 6 and head[5] == path
            elif current and head[0] == "Rss:":
                rss = int(head[1])
            elif current and head[0] == "VmFlags:":
                found.append((set(head[1:]), rss))
    return found


def test_write_goes_through_the_descriptor_and_every_mapping_sees_it(tmp_path):
    writer = MappedFileQueue(str(tmp_path / "commitlog"), SIZE, True).load()
    first = writer.file_for_write(0)
    rolled = writer.file_for_write(SIZE)                      # created by the roll
    reader = MappedFileQueue(str(tmp_path / "commitlog"), SIZE, False).load()
    try:
        first.write(SIZE - 3, b"abc")
        rolled.write(0, memoryview(b"xyz" * 3000)[1:])        # any bytes-like, of any length
        assert bytes(reader.files[0].view[SIZE - 3:]) == b"abc"
        assert bytes(reader.files[1].view[:8999]) == (b"xyz" * 3000)[1:]
        for mf in (first, rolled):
            # the writer's own mapping holds no page: nothing went through it
            assert sorted((("wr" in flags), rss > 0) for flags, rss in mappings(mf.path)) == [(False, True),
                                                                                             (True, False)]
    finally:
        writer.close()
        reader.close()
    assert first.fd == rolled.fd == -1
    with open(first.path, "rb") as f:
        f.seek(SIZE - 3)
        assert f.read() == b"abc"


def test_without_read_ahead_a_mapping_is_random_access_and_by_default_not(tmp_path):
    path = str(tmp_path / "00000000000000000000")
    plain = MappedFile(path, 0, SIZE, True).open(create=True)
    random = MappedFile(path, 0, SIZE, True, readahead=False).open()
    try:
        assert sorted("rr" in flags for flags, _rss in mappings(path)) == [False, True]
    finally:
        plain.close()
        random.close()
    assert mappings(path) == []


def test_the_index_file_is_mapped_without_read_ahead_for_writing_and_reading(tmp_path):
    p = str(tmp_path / "20240101000000000")
    writer = IndexFile(p, 64, 256, True).open(create=True)
    reader = IndexFile(p, 64, 256, False).open()
    try:
        flags = [fl for fl, _rss in mappings(p)]
        assert len(flags) == 2 and all("rr" in fl for fl in flags)
        assert sorted("wr" in fl for fl in flags) == [False, True]
    finally:
        writer.close()
        reader.close()


@pytest.mark.parametrize("made", [0, SIZE // 4])
def test_the_newest_file_short_of_its_size_is_being_created(tmp_path, made):
    """Creation is an empty file, then its blocks reserved (ext4 grows it as it goes): a reader
    loading meanwhile (a consumer's first request for a new queue) leaves it to ``refresh``
    instead of failing with FileSizeMismatch, and an owner loading after a kill meanwhile
    (recovery) finishes creating it."""
    d = tmp_path / "commitlog"
    writer = MappedFileQueue(str(d), SIZE, True).load()
    writer.file_for_write(0).write(0, b"first")
    newest = d / f"{SIZE:020d}"
    with open(newest, "wb") as f:                     # created, its blocks not all reserved yet
        f.truncate(made)
    reader = MappedFileQueue(str(d), SIZE, False).load()
    try:
        assert [f.start for f in reader.files] == [0]
        assert bytes(reader.files[0].view[:5]) == b"first"
        reader.refresh()                              # still short: still not mapped
        assert [f.start for f in reader.files] == [0]
        owner = MappedFileQueue(str(d), SIZE, True).load()     # the owner's load finishes it
        assert [f.start for f in owner.files] == [0, SIZE] and newest.stat().st_size == SIZE
        owner.files[1].write(0, b"second")
        reader.refresh()
        assert [f.start for f in reader.files] == [0, SIZE]
        assert bytes(reader.files[1].view[:6]) == b"second"
        owner.close()
    finally:
        writer.close()
        reader.close()


def test_a_short_file_before_the_newest_or_a_long_one_still_fails_the_load(tmp_path):
    for first, second, bad in ((SIZE // 2, SIZE, f"{0:020d}: length {SIZE // 2} "),
                               (SIZE, SIZE + 1, f"{SIZE:020d}: length {SIZE + 1} ")):
        d = tmp_path / f"commitlog{first}-{second}"
        d.mkdir()
        for start, length in ((0, first), (SIZE, second)):
            with open(d / f"{start:020d}", "wb") as f:
                f.truncate(length)
        for writable in (False, True):
            with pytest.raises(FileSizeMismatch, match=bad):
                MappedFileQueue(str(d), SIZE, writable).load()


def test_a_map_that_fails_names_the_file_and_the_processs_mappings(tmp_path):
    """Out of address space (RLIMIT_AS, in a child) mmap fails with ENOMEM, as it does at
    vm.max_map_count: MapFailed names the file and the mapping count, not a bare errno."""
    code = textwrap.dedent(f"""
        import resource, sys
        from rocketbox.store.errors import MapFailed
        from rocketbox.store.mappedfile import MappedFile
        with open({str(tmp_path / "big")!r}, "wb") as f:
            f.truncate(2 << 30)                      # sparse: no blocks
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        try:
            MappedFile({str(tmp_path / "big")!r}, 0, 2 << 30, False).open()
        except MapFailed as e:
            print(e)
            sys.exit(0)
        sys.exit(1)
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(rf"cannot map {tmp_path}/big \(2147483648 bytes\): Cannot allocate memory; this process has "
                        r"\d+ mappings, vm.max_map_count is \d+\n", r.stdout), r.stdout


def test_a_map_failure_near_max_map_count_says_how_to_raise_it():
    assert map_failure("/s/cq/T/0/0", 6000000, "Cannot allocate memory", 65530, 65530) == (
        "cannot map /s/cq/T/0/0 (6000000 bytes): Cannot allocate memory; this process has 65530 mappings, "
        "vm.max_map_count is 65530 (raise it: sysctl -w vm.max_map_count=655360)")
    assert "raise it" not in map_failure("/f", 1, "Cannot allocate memory", 800, 65530)


def test_a_released_mapping_a_view_still_holds_counts_against_the_budget_until_closed(tmp_path):
    """#49: the budget evicts a file whose mapping a caller still views (mmap.close raises
    BufferError): the mapping stays counted, so no more than ``budget`` mappings are ever open, and
    it is closed (and uncounted) once the view is dropped."""
    import numpy as np

    from rocketbox.store.mappedfile import OpenFiles
    budget = OpenFiles(budget=3)
    files = []
    for i in range(6):
        mf = MappedFile(str(tmp_path / f"{i:020d}"), i * 4096, 4096, True, cache=budget).open(create=True)
        files.append(mf)
    held = np.frombuffer(files[3].use().mm, dtype=np.uint8)     # a view into file 3's mapping
    for mf in files[4:] + files[:3]:                              # file 3 is evicted under the view
        mf.use()
        assert len(budget.lru) + len(budget.lingering) <= 3
    assert len(budget.lingering) == 1 and held[0] == 0            # still mapped: the view is valid
    assert len(budget.lru) == 2
    del held
    files[4].use()
    files[5].use()                                                # the next eviction closes it
    assert budget.lingering == [] and len(budget.lru) == 3
    for mf in files:
        mf.close()


def test_a_running_cut_zeroes_past_the_offset_in_place_and_keeps_every_file(tmp_path):
    """A slave's cut (its master lost its tail) while other processes map the files: the same
    files (inodes) and sizes, every mapping reads zeros from the offset on, bytes before it kept,
    and a writer reserves and writes there again."""
    size = 1 << 16
    writer = MappedFileQueue(str(tmp_path), size, True)
    for start in (0, size, 2 * size):
        writer.create(start).write(0, bytes([start // size + 1]) * size)
    reader = MappedFileQueue(str(tmp_path), size, False).load()
    inodes = [os.stat(f.path).st_ino for f in reader.files]
    writer.cut(size + 1000)
    assert [os.stat(f.path).st_ino for f in reader.files] == inodes
    assert [os.path.getsize(f.path) for f in reader.files] == [size] * 3
    first, second, third = (bytes(f.mm) for f in reader.files)
    assert first == b"\x01" * size and third == bytes(size)
    assert second == b"\x02" * 1000 + bytes(size - 1000)
    writer.reserve(size + 1000, size + 2000)
    writer.write(size + 1000, b"\x07" * 1000)
    assert bytes(reader.files[1].mm[1000:2000]) == b"\x07" * 1000
    writer.close()
    reader.close()
