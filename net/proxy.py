"""PROXY protocol v2 (HAProxy's ``send-proxy-v2``), sans-IO: the header HAProxy puts in front of a
connection to a reader, carrying the client's own address, so a record's born host and the logs
name the client rather than HAProxy.

    12-byte signature | ver/cmd (0x21 PROXY, 0x20 LOCAL) | family | length (u16) | addresses ...
    TCP over IPv4 (0x11): src 4, dst 4, src port 2, dst port 2;  TCP over IPv6 (0x21): 16, 16, 2, 2

A connection that does not start with the signature is a plain one (tools and tests may connect
to a reader directly): a remoting frame cannot start with it, since its length field would read as
0x0D0A0D0A, far above the frame limit.  Readers listen on 127.0.0.1 only, so only local processes
can present a header.
"""
from __future__ import annotations

import ipaddress
import struct

SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
_HEAD = struct.Struct(">BBH")          # ver/cmd, family, address length


class ProxyError(Exception):
    """A PROXY header that is not one we can read; the connection cannot continue."""


def parse(buf: bytes) -> tuple[int, tuple[str, int] | None] | None:
    """-> (bytes the header takes, the client's (host, port) or None when it carries none), (0,
    None) for a connection without a header, or None while ``buf`` is too short to tell."""
    n = min(len(buf), len(SIGNATURE))
    if buf[:n] != SIGNATURE[:n]:
        return 0, None
    if len(buf) < len(SIGNATURE) + _HEAD.size:
        return None
    ver_cmd, family, length = _HEAD.unpack_from(buf, len(SIGNATURE))
    end = len(SIGNATURE) + _HEAD.size + length
    if ver_cmd >> 4 != 2 or ver_cmd & 0xF not in (0, 1):
        raise ProxyError(f"PROXY header version/command 0x{ver_cmd:02x} is not v2 PROXY or LOCAL")
    if len(buf) < end:
        return None
    at = len(SIGNATURE) + _HEAD.size
    if ver_cmd & 0xF == 0:                       # LOCAL: HAProxy's own health check
        return end, None
    if family == 0x11 and length >= 12:
        return end, (str(ipaddress.IPv4Address(buf[at:at + 4])), struct.unpack_from(">H", buf, at + 8)[0])
    if family == 0x21 and length >= 36:
        return end, (str(ipaddress.IPv6Address(buf[at:at + 16])), struct.unpack_from(">H", buf, at + 32)[0])
    return end, None                             # UNSPEC or a family we do not need: keep the socket's
