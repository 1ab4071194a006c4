"""The supervisor names a role that dies twice on the same record (#49): a defect, not a restart
loop left to itself."""
import logging

from rocketbox.appliance.supervisor import Supervisor
from rocketbox.shm.layout import C
from rocketbox.shm.state import SharedState
from tests.unit.writer.rig import small_config


def test_a_dispatcher_dying_twice_at_the_same_record_is_named(tmp_path, caplog):
    cfg = small_config(tmp_path / "store", "sup")
    sv = Supervisor(cfg, None)
    sv.sh = SharedState(cfg.geometry()).create()
    try:
        ctl = sv.sh.control
        ctl[C.WRITTEN], ctl[C.DISPATCHED] = 5000, 4096
        with caplog.at_level(logging.INFO):
            sv._same_record("dispatcher")
            assert "DEFECT" not in caplog.text                    # once may be anything (a kill)
            sv._same_record("writer")                             # a role with no record position
            sv._same_record("dispatcher")
            assert caplog.text.count("DEFECT: dispatcher died twice on the record at CommitLog offset 4096") == 1
            ctl[C.DISPATCHED] = 5000                              # caught up: an idle role's death is no record's
            sv._same_record("dispatcher")
            sv._same_record("dispatcher")
            assert caplog.text.count("DEFECT") == 1
    finally:
        sv.sh.close()
        sv.sh.unlink()
