import json

import pytest

from rocketbox.store import configfile
from rocketbox.store.checkpoint import Checkpoint
from rocketbox.store.errors import StoreError


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


def test_dumps_gives_the_bytes_of_json_with_tab_indentation():
    """The layout fastjson's pretty printer writes (FACTS: TAB-indented), as ``json`` gives it,
    over config-shaped data and strings that look like indentation or JSON."""
    samples = [
        {},
        {"v": 1},
        {"offsetTable": {f"T{t}@G{g}": {str(q): 10 ** 12 + q for q in range(3)} for t in range(3) for g in range(2)}},
        {"dataVersion": {"counter": 3, "timestamp": 1795281395005}, "topicConfigTable": {
            "TBW102": {"order": False, "perm": 7, "readQueueNums": 8, "topicFilterType": "SINGLE_TAG",
                       "topicName": "TBW102", "topicSysFlag": 0, "writeQueueNums": 8}}},
        {"configTable": {"ns": {"k": "  two spaces\n  then\ta tab", "q": 'a "quote" and \\ backslash',
                                "u": "é☃ \u2028 \x7f \x01", "deep": "{\n  \"x\": 1\n}"}}},
        {"list": [1, [2, [3, []]], {}, None, True, -5], "empty": {"a": {}, "b": []}, "z": {"y": {"x": {"w": {}}}}},
    ]
    for data in samples:
        assert configfile.dumps(data) == json.dumps(data, indent="\t", sort_keys=True, ensure_ascii=False).encode()


def test_members_laid_out_once_give_the_bytes_dumps_gives_the_whole_file():
    """topics.json and subscriptionGroup.json are written after every change of one member, from
    members laid out once each: the same bytes as ``dumps`` of the whole, whatever the members
    and their order of change."""
    def config(name, n):
        return {"groupName": name, "retryQueueNums": n, "brokerId": 0, "consumeEnable": n % 2 == 0,
                "attributes": {}, "note": "a  b\tc \u00e9"}       # (spaces and a TAB inside a string)

    version = {"counter": 7, "timestamp": 1700000000000}
    table = {f"g{i:03d}": config(f"g{i:03d}", i) for i in range(0, 40, 3)}
    members = configfile.Members("subscriptionGroupTable", table)
    assert members.file({"dataVersion": version}) == configfile.dumps(
        {"dataVersion": version, "subscriptionGroupTable": table})
    for i, name in enumerate(["g003", "a-first", "z-last", "g004", "%RETRY%g", "g003", "g0031"]):
        table[name] = config(name, 100 + i)                        # changed in place, and new ones
        members.put(name, table[name])
        assert members.file({"dataVersion": version}) == configfile.dumps(
            {"dataVersion": version, "subscriptionGroupTable": table}), name
    empty = configfile.Members("topicConfigTable", {})
    assert empty.file({"dataVersion": version}) == configfile.dumps({"dataVersion": version, "topicConfigTable": {}})
    assert json.loads(members.file({"dataVersion": version}))["subscriptionGroupTable"] == table


def test_checkpoint_offsets_follow_rocketmqs_three_fields_and_an_old_file_has_none(tmp_path):
    from rocketbox.store.checkpoint import Checkpoint
    path = str(tmp_path / "checkpoint")
    c = Checkpoint(path)
    c.physic_ts, c.logics_ts, c.index_ts, c.physic_offset, c.logics_offset = 5000, 4000, 3000, 777, 555
    c.save()
    raw = open(path, "rb").read()
    assert len(raw) == 4096 and raw[:24] == (5000).to_bytes(8, "big") + (4000).to_bytes(8, "big") + \
        (3000).to_bytes(8, "big")                         # what RocketMQ reads, where it reads it
    back = Checkpoint(path).load()
    assert (back.physic_offset, back.logics_offset, back.safe_offset) == (777, 555, 555)
    with open(path, "wb") as f:                           # RocketMQ's own: the offsets unknown
        f.write(raw[:24] + bytes(4096 - 24))
    assert Checkpoint(path).load().safe_offset == 0
