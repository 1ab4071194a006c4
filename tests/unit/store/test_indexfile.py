import numpy as np

from rocketbox.store.indexfile import HEADER_SIZE, IndexFile, file_size, name_for
from rocketbox.store.javahashes import index_key_hashes


def test_layout_size_and_name():
    assert file_size(5_000_000, 20_000_000) == 420_000_040
    assert len(name_for(1700000000123)) == 17 and name_for(1700000000123).endswith("123")


def test_put_lookup_chain_and_header_bytes(tmp_path):
    p = str(tmp_path / "20240101000000000")
    ix = IndexFile(p, 8, 32, True).open(create=True)
    keys = ["T#a", "T#b", "T#a", "T#c"]
    hashes = index_key_hashes(keys)
    phys = np.array([100, 200, 300, 400])
    ts = np.array([1_000_000, 1_001_000, 1_005_000, 1_009_999])
    assert ix.put_batch(hashes, phys, ts) == 4
    assert ix.lookup(int(hashes[0]), 0, 2**62, 10) == [300, 100]
    assert ix.lookup(int(hashes[3]), 0, 2**62, 10) == [400]
    assert ix.lookup(int(hashes[0]), 1_003_000, 2**62, 10) == [300]
    ix.close()
    raw = open(p, "rb").read()
    assert len(raw) == file_size(8, 32)
    begin_ts, end_ts, begin_phys, end_phys = (int.from_bytes(raw[i:i + 8], "big") for i in (0, 8, 16, 24))
    assert (begin_ts, end_ts, begin_phys, end_phys) == (1_000_000, 1_009_999, 100, 400)
    assert int.from_bytes(raw[36:40], "big") == 5         # indexCount starts at 1
    slots_in_use = len({int(h) % 8 for h in hashes})
    assert int.from_bytes(raw[32:36], "big") == slots_in_use
    e3 = HEADER_SIZE + 8 * 4 + 3 * 20                      # entry number 3 = third key "T#a"
    assert int.from_bytes(raw[e3:e3 + 4], "big") == int(hashes[2])
    assert int.from_bytes(raw[e3 + 4:e3 + 12], "big") == 300
    assert int.from_bytes(raw[e3 + 12:e3 + 16], "big") == 5      # (1_005_000 - 1_000_000) / 1000
    assert int.from_bytes(raw[e3 + 16:e3 + 20], "big") == 1      # prev = entry 1 ("T#a" first)


def test_batches_chain_across_calls_and_fill_up(tmp_path):
    ix = IndexFile(str(tmp_path / "x"), 4, 6, True).open(create=True)
    h = index_key_hashes(["T#k"] * 3)
    assert ix.put_batch(h, np.array([1, 2, 3]), np.array([5000, 5000, 5000])) == 3
    assert ix.put_batch(h, np.array([4, 5, 6]), np.array([6000, 6000, 6000])) == 2
    assert ix.is_full
    assert ix.lookup(int(h[0]), 0, 2**62, 10) == [5, 4, 3, 2, 1]
    ix.close()


def test_uncommitted_batch_is_skipped_without_cutting_chains(tmp_path):
    """Crash after entries and slots were written but before the header: the slot points past
    index_count.  The next put must chain to the committed entries, not drop them."""
    ix = IndexFile(str(tmp_path / "y"), 4, 20, True).open(create=True)
    h = index_key_hashes(["T#k"] * 2)
    ix.put_batch(h, np.array([1, 2]), np.array([5000, 5000]))
    saved = ix.h("index_count"), ix.h("end_phys"), ix.h("end_ts"), ix.h("slot_count")
    ix.put_batch(h, np.array([3, 4]), np.array([6000, 6000]))       # then "crash": header rolled back
    ix.header["index_count"], ix.header["end_phys"], ix.header["end_ts"], ix.header["slot_count"] = saved
    assert ix.lookup(int(h[0]), 0, 2**62, 10) == [2, 1]
    ix.put_batch(h, np.array([3, 4]), np.array([6000, 6000]))       # re-dispatch
    assert ix.lookup(int(h[0]), 0, 2**62, 10) == [4, 3, 2, 1]
    ix.close()


def test_put_few_writes_the_bytes_put_batch_writes(tmp_path):
    """Same keys, same calls: the struct path, the numpy path and the compiled pass (when built)
    leave identical files, through
    slot collisions, chains across calls, an uncommitted batch after a crash, a clock gone back, and a
    full file."""
    from rocketbox.native import compiled
    rng = np.random.default_rng(7)
    files = [IndexFile(str(tmp_path / name), 5, 60, True).open(create=True) for name in ("batch", "few", "compiled")]
    batch, few, comp = files
    ts = 1_700_000_000_000
    for call in range(30):
        k = int(rng.integers(1, 9))
        hashes = index_key_hashes([f"T#{int(x)}" for x in rng.integers(0, 12, k)])
        phys = 1000 * call + np.arange(k) * 10
        stamps = ts + call * 700 + np.arange(k) * 300
        if call == 5:       # a clock that went back: before the file's begin time, a time diff of 0
            stamps = stamps - 60_000
        if call == 12:      # a crash: entries and slots written, the header rolled back
            for ix in files:
                saved = [ix.h(f) for f in ("index_count", "end_phys", "end_ts", "slot_count")]
                ix.put_batch(hashes, phys, stamps)
                for f, v in zip(("index_count", "end_phys", "end_ts", "slot_count"), saved):
                    ix.header[f] = v
        got = (batch.put_batch(hashes, phys, stamps), few.put_few(hashes.tolist(), phys.tolist(), stamps.tolist()),
               comp.put_compiled(hashes, phys, stamps) if compiled else comp.put_batch(hashes, phys, stamps))
        assert got[0] == got[1] == got[2], call
        assert batch.mf.mm[:] == few.mf.mm[:] == comp.mf.mm[:], call
    assert batch.is_full and few.is_full
    assert few.put_few([1], [1], [ts]) == 0
    for ix in files:
        ix.close()


def test_truncate_drops_the_entries_of_records_from_an_offset_and_the_rest_reads_as_before(tmp_path):
    keys = [f"T#k{i % 7}" for i in range(40)]
    hashes = index_key_hashes(keys)
    phys = np.arange(40) * 100 + 100
    ts = 1_000_000 + np.arange(40) * 1000
    whole = IndexFile(str(tmp_path / "a"), 8, 64, True).open(create=True)
    whole.put_batch(hashes[:25], phys[:25], ts[:25])
    cut = IndexFile(str(tmp_path / "b"), 8, 64, True).open(create=True)
    cut.put_batch(hashes, phys, ts)
    assert cut.truncate(int(phys[25])) == 26                 # entries 1..25 kept
    for f in ("index_count", "end_phys", "end_ts", "begin_phys", "slot_count"):
        assert cut.h(f) == whole.h(f), f
    assert np.array_equal(cut.slots, whole.slots)
    for h in set(hashes.tolist()):
        assert cut.lookup(h, 0, 2**62, 99) == whole.lookup(h, 0, 2**62, 99)
    cut.put_batch(hashes[25:], phys[25:], ts[25:])           # re-dispatch adds them back
    again = IndexFile(str(tmp_path / "c"), 8, 64, True).open(create=True)
    again.put_batch(hashes, phys, ts)
    assert all(cut.lookup(h, 0, 2**62, 99) == again.lookup(h, 0, 2**62, 99) for h in set(hashes.tolist()))
    assert cut.truncate(int(phys[-1]) + 1) == 41             # nothing past: unchanged
    assert cut.truncate(0) == 1 and cut.h("slot_count") == 0 and not cut.slots.any()
    for ix in (whole, cut, again):
        ix.close()
