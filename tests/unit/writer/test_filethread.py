"""writer.filethread: a config file written off its owner's loop, changes batched per write."""
import threading

from rocketbox.writer.filethread import FileThread


def _owner(tmp_path, fail_on=()):
    """An owner whose state is a list of names, its file those names joined; each write waits
    for ``gate`` once it has begun (``begun`` set), so a test can add changes meanwhile."""
    state, writes, gate, begun = [], [], threading.Event(), threading.Event()

    def store(text, jobs):
        begun.set()
        assert gate.wait(5)
        if set(jobs) & set(fail_on):
            raise OSError(28, "No space left on device")
        (tmp_path / "f").write_bytes(text)
        writes.append((text, list(jobs)))

    ft = FileThread("test-file", lambda jobs: ",".join(state).encode(), store)

    def change(name):
        with ft.lock:
            state.append(name)
            ft.submit(name)
    return ft, change, writes, gate, begun


def test_changes_made_while_a_write_is_under_way_go_together_in_the_next_one(tmp_path):
    ft, change, writes, gate, begun = _owner(tmp_path)
    change("a")
    assert begun.wait(5)
    assert ft.done() == []                                   # under way: nothing written yet
    for name in "bcd":
        change(name)
    gate.set()
    ft.wait_idle()
    assert writes == [(b"a", ["a"]), (b"a,b,c,d", ["b", "c", "d"])]
    assert ft.done() == [(["a"], None), (["b", "c", "d"], None)]
    assert ft.done() == []
    assert (tmp_path / "f").read_bytes() == b"a,b,c,d"
    ft.close()
    assert not ft.thread.is_alive()


def test_a_failed_write_is_its_jobs_error_and_the_thread_goes_on(tmp_path):
    ft, change, writes, gate, begun = _owner(tmp_path, fail_on=("bad",))
    gate.set()
    change("bad")
    ft.wait_idle()
    change("good")
    ft.wait_idle()
    (failed, error), (ok, none) = ft.done()
    assert failed == ["bad"] and isinstance(error, OSError) and error.errno == 28
    assert ok == ["good"] and none is None
    assert writes == [(b"bad,good", ["good"])]               # the owner's state, as it stood
    ft.close()


def test_close_writes_what_is_pending_first(tmp_path):
    ft, change, writes, gate, begun = _owner(tmp_path)
    change("a")
    assert begun.wait(5)
    change("b")
    gate.set()
    ft.close()
    assert writes == [(b"a", ["a"]), (b"a,b", ["b"])]
    assert [jobs for jobs, _e in ft.done()] == [["a"], ["b"]]
