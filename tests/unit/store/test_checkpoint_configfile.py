import json

import pytest

from store import configfile
from store.checkpoint import Checkpoint
from store.errors import StoreError


def test_checkpoint_bytes(tmp_path):
    p = str(tmp_path / "checkpoint")
    c = Checkpoint(p)
    c.physic_ts, c.logics_ts, c.index_ts = 10_000, 9_000, 5_000
    c.save()
    raw = open(p, "rb").read()
    assert len(raw) == 4096
    assert raw[:24] == (10_000).to_bytes(8, "big") + (9_000).to_bytes(8, "big") + (5_000).to_bytes(8, "big")
    c2 = Checkpoint(p).load()
    assert (c2.physic_ts, c2.logics_ts, c2.index_ts) == (10_000, 9_000, 5_000)
    assert c2.min_timestamp == 6_000 and c2.min_timestamp_index == 5_000


def test_unquoted_int_keys_from_java():
    text = '{"offsetTable":{"T@g":{0:6,1:3},"U@g":{ 12 : 9}}}'
    assert configfile.loads_tolerant(text) == {"offsetTable": {"T@g": {"0": 6, "1": 3}, "U@g": {"12": 9}}}


def test_write_keeps_bak_and_read_falls_back(tmp_path):
    p = str(tmp_path / "config" / "topics.json")
    configfile.write(p, {"v": 1})
    configfile.write(p, {"v": 2})
    assert json.load(open(p + ".bak")) == {"v": 1}
    assert "\t" in open(p).read()
    open(p, "w").write("{broken")
    assert configfile.read(p) == {"v": 1}
    open(p + ".bak", "w").write("")
    with pytest.raises(StoreError, match="topics.json"):
        configfile.read(p)
    assert configfile.read(str(tmp_path / "none.json")) is None
