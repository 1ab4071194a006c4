"""How files are mapped: the kernel's own record of each mapping (/proc/self/smaps VmFlags; "rr"
is VM_RAND_READ, what MADV_RANDOM sets) for the files the writer appends to and the IndexFile,
against a reader's mapping of the same CommitLog."""
import os

from store.indexfile import IndexFile
from store.mappedfile import MappedFileQueue, device_read_ahead_kb, offset_to_name

SIZE = 1 << 20


def vm_flags(path: str) -> list[set[str]]:
    """The VmFlags of each mapping of ``path`` in this process."""
    found, current = [], None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:      # a mapping's first line
                current = len(head) == 6 and head[5] == path
            elif current and head[0] == "VmFlags:":
                found.append(set(head[1:]))
    return found


def test_an_append_only_queue_maps_its_files_loaded_and_created_without_read_ahead(tmp_path):
    d = str(tmp_path / "commitlog")
    os.makedirs(d)
    with open(os.path.join(d, offset_to_name(0)), "wb") as f:
        f.truncate(SIZE)
    writer = MappedFileQueue(d, SIZE, True, readahead=False).load()
    rolled = writer.file_for_write(SIZE)                    # the next file, created by the roll
    reader = MappedFileQueue(d, SIZE, False).load()
    try:
        assert [f.start for f in writer.files] == [0, SIZE] and [f.start for f in reader.files] == [0, SIZE]
        for mf in writer.files:
            flags = vm_flags(mf.path)
            assert len(flags) == 2                          # the writer's and the reader's mapping
            assert sorted("rr" in fl and "wr" in fl for fl in flags) == [False, True]
        rolled.mm[:4] = b"abcd"                             # still an ordinary shared, writable mapping
        assert bytes(reader.files[1].view[:4]) == b"abcd"
        assert os.pread(os.open(rolled.path, os.O_RDONLY), 4, 0) == b"abcd"
    finally:
        writer.close()
        reader.close()
    assert vm_flags(os.path.join(d, offset_to_name(0))) == []


def test_by_default_a_mapping_keeps_the_kernels_read_ahead(tmp_path):
    q = MappedFileQueue(str(tmp_path / "cq"), SIZE, True).load()
    mf = q.file_for_write(0)
    try:
        (flags,) = vm_flags(mf.path)
        assert "rr" not in flags and "wr" in flags
    finally:
        q.close()


def test_the_index_file_is_mapped_without_read_ahead_for_writing_and_reading(tmp_path):
    p = str(tmp_path / "20240101000000000")
    writer = IndexFile(p, 64, 256, True).open(create=True)
    reader = IndexFile(p, 64, 256, False).open()
    try:
        flags = vm_flags(p)
        assert len(flags) == 2 and all("rr" in fl for fl in flags)
        assert sorted("wr" in fl for fl in flags) == [False, True]
    finally:
        writer.close()
        reader.close()


def test_device_read_ahead_is_the_disks_figure_and_unknown_off_a_block_device(tmp_path):
    st = os.stat(tmp_path)
    disk = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if os.path.exists(os.path.join(disk, "partition")):
        disk = os.path.dirname(disk)
    queue = os.path.join(disk, "queue", "read_ahead_kb")
    want = int(open(queue).read()) if os.path.exists(queue) else None      # None: /tmp on tmpfs
    assert device_read_ahead_kb(str(tmp_path)) == want
    assert device_read_ahead_kb("/dev/shm") is None
