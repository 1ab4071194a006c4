import pytest

from rocketbox.appliance.config import ConfigError, load


def test_defaults_are_rocketmqs(tmp_path):
    c = load()
    assert (c.brokerClusterName, c.brokerId, c.listenPort, c.brokerRole, c.flushDiskType) == \
        ("DefaultCluster", 0, 10911, "ASYNC_MASTER", "ASYNC_FLUSH")
    assert (c.mappedFileSizeCommitLog, c.mappedFileSizeConsumeQueue, c.maxMessageSize) == (1073741824, 6000000, 4194304)
    assert (c.flushIntervalCommitLog, c.flushCommitLogLeastPages, c.syncFlushTimeout) == (500, 4, 5000)
    assert (c.fileReservedTime, c.deleteWhen, c.diskMaxUsedSpaceRatio, c.defaultTopicQueueNums) == (72, "04", 75, 8)
    assert (c.maxHashSlotNum, c.maxIndexNum) == (5000000, 20000000)
    assert c.delay_levels_ms[:3] == (1000, 5000, 10000) and c.delay_levels_ms[-1] == 7200000
    assert c.shmPrefix == "/rbx-10911" and c.readerProcessNums == 2
    assert c.rejectTransactionMessage is False         # RocketMQ's default: transactions are served


def test_properties_syntax_aliases_and_derived_paths(tmp_path):
    p = tmp_path / "broker.conf"
    p.write_text("# comment\n! also a comment\nbrokerName = broker-a\nlistenPort: 10000\n"
                 "mapedFileSizeConsumeQueue=6000\nstorePathRootDir /data/rmq\nflushDiskType=SYNC_FLUSH\n")
    c = load(str(p))
    assert (c.brokerName, c.listenPort, c.mappedFileSizeConsumeQueue) == ("broker-a", 10000, 6000)
    assert c.commitlog_dir == "/data/rmq/commitlog" and c.sync_flush and c.shmPrefix == "/rbx-10000"


@pytest.mark.parametrize("line,words", [
    ("brokerIdd=1", ["broker.conf:2", "unknown key 'brokerIdd'", "'1'", "did you mean 'brokerId'?"]),
    ("flushdisktype=SYNC_FLUSH", ["unknown key 'flushdisktype'", "did you mean 'flushDiskType'?"]),
    ("brokerId=one", ["broker.conf:2", "brokerId", "'one'", "expected a whole number in [0, 1024]"]),
    ("listenPort=10911.5", ["listenPort", "expected a whole number in [3, 65534]"]),
    ("flushDiskType=FAST", ["broker.conf:2", "flushDiskType", "'FAST'", "ASYNC_FLUSH"]),
    ("diskMaxUsedSpaceRatio=99", ["broker.conf:2", "diskMaxUsedSpaceRatio", "'99'"]),
    ("autoCreateTopicEnable=yes", ["broker.conf:2", "autoCreateTopicEnable", "true or false"]),
    ("messageDelayLevel=1s 5x", ["messageDelayLevel", "5x"]),
    ("mappedFileSizeCommitLog=100000", ["mappedFileSizeCommitLog", "largest record"]),
    ("deleteWhen=04;25", ["deleteWhen", "04;25"]),
    ("rejectTransactionMessage=maybe", ["rejectTransactionMessage", "true or false"]),
])
def test_bad_values_name_file_line_key_value(tmp_path, line, words):
    p = tmp_path / "broker.conf"
    p.write_text(f"brokerName=x\n{line}\n")
    with pytest.raises(ConfigError) as e:
        load(str(p))
    for w in words:
        assert w in str(e.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load(str(tmp_path / "nope.conf"))


def test_no_python_wording_and_no_guess_for_a_key_like_none(tmp_path):
    p = tmp_path / "broker.conf"
    for line in ("brokerId=one", "listenPort=", "zzzTop=1"):
        p.write_text(line + "\n")
        with pytest.raises(ConfigError) as e:
            load(str(p))
        assert "invalid literal" not in str(e.value) and "base 10" not in str(e.value)
        assert ("did you mean" in str(e.value)) is False
