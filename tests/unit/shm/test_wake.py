"""PipeWaker: posts are remembered until read, a burst costs one wake, a full pipe loses nothing."""
import os
import time

from rocketbox.shm.wake import PipeWaker


def test_posts_wake_once_and_a_full_pipe_is_still_one_pending_wake():
    name = f"/rbxwake-{os.getpid()}.t"
    a = PipeWaker(name).create()
    b = PipeWaker(name).attach()               # another party, as the writer would be
    try:
        assert not a.wait(0)
        b.post()
        b.post()
        assert a.wait(0) and not a.wait(0)     # two posts, one wake, nothing left over
        for _ in range(70_000):                # more than a pipe holds: the surplus is dropped
            b.post()
        assert a.wait(0) and not a.wait(0)
        t0 = time.monotonic()
        assert not a.wait(0.2) and time.monotonic() - t0 >= 0.15
        assert os.path.exists("/dev/shm/" + name.lstrip("/"))
    finally:
        b.close()
        a.close()
        a.unlink()
    assert not os.path.exists("/dev/shm/" + name.lstrip("/"))
