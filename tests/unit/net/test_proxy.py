"""PROXY protocol v2 headers as HAProxy sends them, and connections without one."""
import ipaddress
import struct

import pytest

from rocketbox.net import proxy


def header(cmd: int, family: int, addrs: bytes) -> bytes:
    return proxy.SIGNATURE + struct.pack(">BBH", 0x20 | cmd, family, len(addrs)) + addrs


def test_client_addresses_are_read_and_the_header_consumed():
    v4 = header(1, 0x11, bytes([10, 1, 2, 3, 127, 0, 0, 1]) + struct.pack(">HH", 40001, 24200))
    assert proxy.parse(v4 + b"\x00\x00\x00\x10rest") == (len(v4), ("10.1.2.3", 40001))
    src = ipaddress.IPv6Address("2001:db8::7").packed
    v6 = header(1, 0x21, src + bytes(16) + struct.pack(">HH", 50002, 24200))
    assert proxy.parse(v6) == (len(v6), ("2001:db8::7", 50002))
    local = header(0, 0x00, b"")                 # HAProxy's health check
    assert proxy.parse(local) == (len(local), None)
    tlv = header(1, 0x11, bytes(8) + struct.pack(">HH", 1, 2) + b"\x04\x00\x01x")   # extra TLVs skipped
    assert proxy.parse(tlv) == (len(tlv), ("0.0.0.0", 1))


def test_plain_connections_and_partial_headers():
    frame = struct.pack(">ii", 20, 16) + bytes(20)
    assert proxy.parse(frame) == (0, None)       # a remoting frame: no header
    assert proxy.parse(b"\x00") == (0, None)
    v4 = header(1, 0x11, bytes(12))
    for cut in (1, 12, 15, 16, len(v4) - 1):
        assert proxy.parse(v4[:cut]) is None     # wait for more
    with pytest.raises(proxy.ProxyError, match="version/command 0x13"):
        proxy.parse(proxy.SIGNATURE + b"\x13\x11\x00\x0c" + bytes(12))
