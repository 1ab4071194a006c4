"""A full disk: appends are refused with SERVICE_NOT_AVAILABLE (14) before any byte is placed;
everything acknowledged before is intact.  Uses a real small tmpfs (needs root to mount)."""
import os
import subprocess

import pytest

from appliance import recovery
from appliance.check import check
from dispatcher.service import DispatcherService
from shm.layout import C
from shm.state import SharedState
from writer.client import PutRequest, RingClient
from writer.service import WriterService
from tests.unit.writer.rig import small_config


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_refuses_cleanly_and_loses_nothing(small_fs):
    cfg = small_config(small_fs / "store", "d", mappedFileSizeCommitLog=1024 * 1024, maxMessageSize=8192,
                       maxIndexNum=2000, mappedFileSizeConsumeQueue=20000)
    sh = SharedState(cfg.geometry()).create()
    try:
        recovery.recover(cfg, sh)
        w, d = WriterService(cfg, sh).open(), DispatcherService(cfg, sh).open()
        c = RingClient(cfg, sh).open()
        acked, refused = [], []
        for i in range(200):
            ticket = c.submit([PutRequest("TBW102", 0, [f"m{i}-".encode() * 1000], [{"UNIQ_KEY": f"U{i:04d}"}])
                            for _ in range(4)])
            while w.step():
                pass
            for r in c.collect(ticket, 1):
                (acked if r.ok else refused).append(r)
            if refused:
                break
        assert refused and {r.status for r in refused} == {14}
        assert len(acked) >= 4
        written = int(sh.control[C.WRITTEN])
        assert not w.step()                         # refusing left no half-written batch behind
        while d.step():
            pass
        c.close()
        w.close()
        d.close()
        rep = check(cfg, verify_index=False)
        assert rep.clean and rep.records == len(acked) and rep.end_offset == written
    finally:
        sh.close()
        sh.unlink()
