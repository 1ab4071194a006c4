import numpy as np

from rocketbox.store.javahash import index_abs_one, index_key_hash, string_hash
from rocketbox.store.javahashes import FEW_HASHES, bytes_hashes, index_key_hashes, string_hashes

VECTORS = {"": 0, "*": 42, "TagA": 2598919, "TagB": 2598920, "hello world": 1794106052,
           "TopicTest": -1902610879, "中文": 646394}


def test_golden_vectors_scalar():
    for s, h in VECTORS.items():
        assert string_hash(s) == h, s


def test_golden_vectors_vectorized_match_scalar():
    keys = list(VECTORS) + ["T#" + "x" * 500, "😀emoji", "a" * 5000]
    assert len(keys) > FEW_HASHES                        # the vector path
    assert string_hashes(keys) == [string_hash(k) for k in keys]
    assert bytes_hashes([k.encode() for k in keys]).dtype == np.int32


def test_many_hashes_continue_from_seeds_on_both_paths():
    keys = list(VECTORS) + ["T#" + "x" * 500, "😀emoji", "a" * 5000, "0A1B2C3D4E5F60718293A4B5C6D7E8F9"]
    seeds = [string_hash(p) for p in ("TopicTest#", "", "中#", "polygenelubricants")] * 3
    want = [string_hash(p + k) for p, k in zip(("TopicTest#", "", "中#", "polygenelubricants") * 3, keys)]
    assert string_hashes(keys, seeds[:len(keys)]) == want                      # vectorized
    for lo in range(0, len(keys), FEW_HASHES):                                 # one by one
        assert string_hashes(keys[lo:lo + FEW_HASHES], seeds[lo:lo + FEW_HASHES]) == want[lo:lo + FEW_HASHES]


def test_index_hash_is_abs_and_min_int_maps_to_zero():
    assert index_key_hash("TopicTest") == 1902610879
    # "polygenelubricants" hashes to Integer.MIN_VALUE in Java
    assert string_hash("polygenelubricants") == -2**31
    assert index_key_hash("polygenelubricants") == 0
    assert index_key_hashes(["polygenelubricants", "TopicTest"]).tolist() == [0, 1902610879]


def test_bytes_keys_match_string_path():
    from rocketbox.store.javahashes import index_key_hashes_bytes
    keys = ["T#abc", "", "T#" + "z" * 5000, "T#中文", "polygenelubricants", "TopicTest#UNIQ0001"]
    assert index_key_hashes_bytes([k.encode() for k in keys]).tolist() == index_key_hashes(keys).tolist()
    assert index_key_hashes_bytes([]).tolist() == []


def test_segments_of_one_buffer_continue_from_a_prefix_hash():
    from rocketbox.store.javahashes import BufferHashes
    text = "xxTagAyy中文zz" + "q" * 40000
    buf = np.frombuffer(text.encode(), dtype=np.uint8)
    segs = [(2, 4), (0, 0), (8, 6), (14, 40000), (1, 3)]          # "TagA", "", "中文", long, "xTa"
    starts, lens = np.array([s for s, _ in segs]), np.array([n for _, n in segs])
    pieces = [bytes(buf[s:s + n]).decode() for s, n in segs]
    assert BufferHashes(buf)(starts, lens).tolist() == [string_hash(p) for p in pieces]
    prefixes = ["TopicTest#", "T#", "", "Q#", "中#"]
    seed = np.array([string_hash(p) for p in prefixes], dtype=np.int32)
    assert BufferHashes(buf)(starts, lens, seed).tolist() == [string_hash(p + s) for p, s in zip(prefixes, pieces)]


def test_one_string_continues_from_a_seed_and_long_ones_fold_right():
    texts = list(VECTORS) + ["T#" + "x" * 500, "😀emoji", "a" * 5000, "polygenelubricants", "键 with space"]
    seed = string_hash("TopicTest#")
    assert [string_hash(t, seed) for t in texts] == [string_hash("TopicTest#" + t) for t in texts]
    assert [string_hash(t) for t in texts] == string_hashes(texts)
    for text in ("a" * 5000, "键" * 300 + "x" * 211, "z" * 256, "y" * 257, "😀" * 200):   # across 256-unit steps
        h = 0
        for c in memoryview(text.encode("utf-16-le")).cast("H"):   # Java's loop over UTF-16 units, literally
            h = (31 * h + c) & 0xFFFFFFFF
        assert string_hash(text) == (h - (1 << 32) if h >= 1 << 31 else h)
    assert [index_abs_one(h) for h in (-2**31, -5, 7)] == [0, 5, 7]
