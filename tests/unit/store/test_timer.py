"""Timer values are read as Java's ``Long.parseLong`` reads them (#49; what 5.x does), not as
Python's ``int()``: checked against JDK 17 (``+5`` and other scripts' digits are longs there too)."""
import pytest

from rocketbox.store import message, timer

NOW, MAX = 1_700_000_000_000, 400 * 86_400_000


@pytest.mark.parametrize("value, want", [(b"5", 5), (b"+5", 5), (b"-5", -5), (b"0005", 5),
                                         ("٥١".encode(), 51), (b"9223372036854775807", 2**63 - 1)])
def test_what_long_parse_long_accepts(value, want):
    assert message.java_long(value) == want


@pytest.mark.parametrize("value", [b"1_000", b" 5 ", b"5 ", b"", b"+", b"-", b"1.5", b"0x10", b"5L",
                                   b"9223372036854775808", b"\xff"])
def test_what_long_parse_long_refuses(value):
    with pytest.raises(ValueError):
        message.java_long(value)


@pytest.mark.parametrize("value", [b"1_000", b" 5 ", b"3e3"])
def test_a_timer_with_such_a_value_is_refused_with_5x_remark(value):
    with pytest.raises(ValueError, match="timer message illegal"):
        timer.deliver_ms(b"TIMER_DELAY_MS\x01" + value, NOW, MAX)
    assert timer.deliver_ms(b"TIMER_DELAY_MS\x01+1000", NOW, MAX) == NOW + 1000


@pytest.mark.parametrize("value, want", [(None, 0), (b"", 0), (b"3", 3), (b"+3", 3), (b"-1", -1), (b"99", 99)])
def test_a_delay_level_is_read_as_integer_parse_int_reads_it(value, want):
    from rocketbox.store import delay
    assert delay.level_of(value) == want


@pytest.mark.parametrize("value", [b" 1", b"1 ", b"1_0", b"abc", b"2147483648"])
def test_a_delay_level_integer_parse_int_refuses(value):
    from rocketbox.store import delay
    with pytest.raises(ValueError, match="is not a delay level"):
        delay.level_of(value)
