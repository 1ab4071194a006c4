"""RemotingServer.check_open_files: near RLIMIT_NOFILE (where a process can no longer accept and
the event loop logs nothing) the server says so, once, and again only after it has recovered."""
import logging
import os
import resource

import pytest

from rocketbox.net.server import RemotingServer, fd_table_size


@pytest.fixture
def low_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    used = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (used + 20, hard))
    try:
        yield used + 20
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_warns_once_near_the_limit_and_rearms_below(low_limit, caplog):
    server = RemotingServer("reader-7", {})
    caplog.set_level(logging.INFO, logger="rocketbox.net")
    server.check_open_files()
    assert not caplog.records                      # ~20 below the limit: nothing to say
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(19)]
    try:
        used = len(os.listdir("/proc/self/fd"))
        server.check_open_files()
        server.check_open_files()                  # still there: said once
        (rec,) = caplog.records
        assert rec.levelno == logging.WARNING
        assert rec.getMessage().startswith(f"reader-7: {used} of {low_limit} open files in use (RLIMIT_NOFILE), "
                                           "0 clients connected: at the limit new clients cannot connect")
    finally:
        for fd in held:
            os.close(fd)
    server.check_open_files()
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO]
    assert "open files in use again" in caplog.records[-1].getMessage()


def test_the_descriptor_table_bounds_the_count_without_walking_it():
    """Far below the limit, the sweep reads one line of /proc/self/status, not every descriptor."""
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(300)]
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
        assert fd_table_size() > max(fds) and fd_table_size() >= len(fds) >= 300
    finally:
        for fd in held:
            os.close(fd)
