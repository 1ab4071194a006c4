import numpy as np
import pytest

from rocketbox.shm.ring import HEADER_SIZE, Ring, RingCorrupt, ring_size


def make(cap=256):
    return Ring(np.zeros(ring_size(cap), dtype=np.uint8))


def test_push_read_release_in_order():
    r = make()
    assert r.try_push(7, [b"abc", np.arange(2, dtype="<u4")])
    assert r.try_push(8, [b"z"])
    got = r.entries()
    assert [(k, bytes(p)) for k, p, _ in got] == [(7, b"abc" + np.arange(2, dtype="<u4").tobytes()), (8, b"z")]
    assert r.write_pos == 8 + 16 + 16
    r.release(got[0][2])
    assert [k for k, _p, _e in r.entries()] == [8]


def test_full_ring_refuses_then_wraps_without_splitting_an_entry():
    r = make(128)
    assert r.try_push(1, [b"x" * 40])          # 48 bytes
    assert r.try_push(2, [b"y" * 40])          # 96
    assert not r.try_push(3, [b"w" * 40])      # needs 48 more, only 32 free
    r.release(r.entries()[0][2])               # free the first 48
    assert r.try_push(3, [b"w" * 40])          # 32-byte tail is skipped with a WRAP entry
    got = r.entries()
    assert [(k, bytes(p)) for k, p, _ in got] == [(2, b"y" * 40), (3, b"w" * 40)]
    assert r.write_pos == 96 + 32 + 48


def test_entry_larger_than_half_the_ring_is_an_error():
    with pytest.raises(ValueError):
        make(128).try_push(1, [b"x" * 100])


def test_limit_bytes_and_skip_all():
    r = make()
    for i in range(5):
        assert r.try_push(i, [b"12345678"])
    assert len(r.entries(limit_bytes=20)) == 2
    r.skip_all()
    assert r.entries() == [] and r.used() == 0
    assert HEADER_SIZE == 128


def test_corrupt_entry_length_raises_instead_of_spinning():
    r = make()
    assert r.try_push(1, [b"abcdefgh"])
    r.data[0:4] = 0                      # length 0 would never advance the reader
    with pytest.raises(RingCorrupt):
        r.entries()
