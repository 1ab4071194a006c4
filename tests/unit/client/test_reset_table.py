"""The two forms of a RESET_CONSUMER_CLIENT_OFFSET body a client may be sent, and the times
``appliance reset-offset -s`` takes."""
from __future__ import annotations

import argparse
import datetime

import pytest

from rocketbox.client.cli import _timestamp
from rocketbox.client.instance import MessageQueue, reset_offset_table
from rocketbox.remoting import mqtable


def test_both_body_forms_give_the_same_table():
    table = {("T", "b1", 0): 5, ("T", "b1", 1): 0}
    java = mqtable.encode({}, "offsetTable", table)
    assert java.startswith(b'{"offsetTable":{{"brokerName":"b1","queueId":0,"topic":"T"}:5,')
    cpp = b'{"offsetTable":[{"brokerName":"b1","offset":5,"queueId":0,"topic":"T"},' \
          b'{"brokerName":"b1","offset":0,"queueId":1,"topic":"T"}]}'
    want = {MessageQueue("T", "b1", 0): 5, MessageQueue("T", "b1", 1): 0}
    assert reset_offset_table(java) == reset_offset_table(cpp) == want
    assert reset_offset_table(b'{"offsetTable":{}}') == {}


@pytest.mark.parametrize("body", [b"", b"[]", b'{"offsetTable":[{"topic":"T"}]}', b'{"offsetTable":3}',
                                  b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:"x"}}'])
def test_a_body_that_is_no_table_is_a_value_error(body):
    with pytest.raises(ValueError):
        reset_offset_table(body)


def test_the_cli_takes_now_ms_and_mqadmins_date_form():
    assert _timestamp("now") == -1 and _timestamp(" 1700000000123 ") == 1700000000123
    local = datetime.datetime(2026, 11, 24, 8, 30, 15, 250000).timestamp()
    assert _timestamp("2026-11-24#08:30:15:250") == int(local * 1000)
    with pytest.raises(argparse.ArgumentTypeError, match="yesterday"):
        _timestamp("yesterday")
