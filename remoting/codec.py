"""The remoting frame codec, sans-IO: bytes in, ``Command`` objects out, and back (FACTS §1).

    frame:   i32 frameLength (bytes after this field) | i32 (serializeType << 24 | headerLen)
             | header (headerLen bytes) | body
    type 0:  JSON header {code, extFields, flag, language, opaque, remark, version, ...}
    type 1:  ROCKETMQ binary header (``_BIN_FIXED`` then remark, then the extFields map)

``Decoder.feed`` takes whatever a read returned (partial frames, several frames at once) and
returns the whole commands it completes.  Bytes that are not a frame raise ``FrameError`` — the
peer's mistake; its connection should be closed — and nothing else ever escapes the decoder.
``encode`` writes a command in the serialization it names (a response uses its request's).

Real clients disagree on dialect (``captures/README.md``): extFields values arrive as strings,
numbers or booleans and are normalized to strings (Java's Map<String, String>); ``language`` as
a name or an ordinal, kept as the name.  Never imports asyncio or sockets.
"""
from __future__ import annotations

import json
import struct

import orjson

from rocketbox import native
from rocketbox.remoting.codes import SERVER_VERSION, LanguageCode, ResponseCode

MAX_FRAME = 16 * 1024 * 1024      # Netty LengthFieldBasedFrameDecoder limit, length field included
JSON, ROCKETMQ = 0, 1             # serialize types
RPC_RESPONSE, RPC_ONEWAY = 0x1, 0x2

_PREFIX = struct.Struct(">ii")    # frameLength, headerLenAndType
_BIN_FIXED = struct.Struct(">hBhiii")   # code i16, language u8, version i16, opaque i32, flag i32, remarkLen i32
assert _BIN_FIXED.size == 17
_BIN_FRAME_HEAD = struct.Struct(">ii" + _BIN_FIXED.format.lstrip(">"))   # _PREFIX then _BIN_FIXED, one pack
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
_LANG_NAMES = {m.value: m.name for m in LanguageCode}
_LANG_CODES = {m.name: m.value for m in LanguageCode}


class FrameError(Exception):
    """Bytes from the peer that are not a remoting frame; the connection cannot continue."""


class Command:
    """One request or response.  ``ext`` is extFields (str -> str); ``body`` raw bytes.

    A binary header whose extFields have a layout this connection has seen before is not made
    into a dict: ``fields`` holds (names, raw ASCII values) in wire order, which
    ``remoting.headers.decode`` types in one generated step, and ``ext`` is built from them
    only when something reads it (after which ``fields`` is None)."""
    __slots__ = ("code", "language", "version", "opaque", "flag", "remark", "_ext", "fields", "body",
                 "serialize_type")

    def __init__(self, code: int, ext: dict | None = None, body: bytes = b"", *, opaque: int = 0, flag: int = 0,
                 remark: str | None = None, language: str = "PYTHON", version: int = SERVER_VERSION,
                 serialize_type: int = JSON, fields: tuple[tuple[str, ...], tuple[bytes, ...]] | None = None):
        self.code, self.body = code, body
        self._ext: dict | None
        self.fields: tuple[tuple[str, ...], tuple[bytes, ...]] | None
        self._ext, self.fields = (None, fields) if fields is not None else (ext if ext is not None else {}, None)
        self.opaque, self.flag, self.remark = opaque, flag, remark
        self.language, self.version, self.serialize_type = language, version, serialize_type

    @property
    def ext(self) -> dict:
        if self._ext is None:
            assert self.fields is not None          # one of the two is always set
            names, values = self.fields
            self._ext, self.fields = dict(zip(names, map(bytes.decode, values))), None
        return self._ext

    @ext.setter
    def ext(self, ext: dict) -> None:
        self._ext, self.fields = ext, None

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RPC_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RPC_ONEWAY)

    def response(self, code: int = ResponseCode.SUCCESS, remark: str | None = None, ext: dict | None = None,
                 body: bytes = b"") -> "Command":
        """The reply to this request: same opaque and serialization, the response flag set."""
        return Command(code, ext, body, opaque=self.opaque, flag=RPC_RESPONSE, remark=remark,
                       language="JAVA", serialize_type=self.serialize_type)

    def __repr__(self) -> str:
        kind = "response" if self.is_response else "oneway" if self.is_oneway else "request"
        return f"Command({kind} code={self.code} opaque={self.opaque} ext={self.ext} body={len(self.body)}B)"


# ---------------------------------------------------------------- decode

def _ext_value(v) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(int(v)) if isinstance(v, int) or v.is_integer() else repr(v)
    return json.dumps(v, separators=(",", ":"))


def _int(v, what: str) -> int:
    if type(v) is int:
        return v
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise FrameError(f"header field {what} is {type(v).__name__}, not an integer")
    try:
        return int(v)
    except ValueError:
        raise FrameError(f"header field {what} is {v!r}, not an integer") from None


def _language(v) -> str:
    if isinstance(v, str):
        return v
    return _LANG_NAMES.get(_int(v, "language"), "OTHER")


def _compiled_json_header(raw: bytes) -> Command:
    """A JSON header's command, read by the compiled ``json_header`` when it takes the header (a
    plain object with string extFields, as every client sends), else by its twin."""
    t = _json_fields(raw)
    if t is None:
        return py_json_header(raw)
    return _command(t[0], t[1], t[2], t[3], t[4], t[5], t[6], None, JSON)


def py_json_header(raw: bytes) -> Command:
    """The JSON header's command in Python: any header, every error (``native.json_header``'s twin)."""
    try:
        h = orjson.loads(raw)           # ~2.5x json.loads on a send's header
    except orjson.JSONDecodeError:      # what only json reads (NaN, lone surrogates, huge ints), or nothing
        try:
            h = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise FrameError(f"JSON header does not parse: {e}") from None
    if not isinstance(h, dict) or "code" not in h:
        raise FrameError("JSON header is not an object with a code")
    ext = h.get("extFields") or {}
    if not isinstance(ext, dict):
        raise FrameError("extFields is not an object")
    for v in ext.values():              # Java's dialect is all strings: kept as is
        if type(v) is not str:
            ext = {str(k): _ext_value(v) for k, v in ext.items() if v is not None}
            break
    remark = h.get("remark")
    return _command(_int(h["code"], "code"), _language(h.get("language", "JAVA")), _int(h.get("version", 0), "version"),
                    _int(h.get("opaque", 0), "opaque"), _int(h.get("flag", 0), "flag"),
                    remark if isinstance(remark, str) else None, ext, None, JSON)


if native.compiled is not None:
    _json_fields = native.compiled.json_header
    _json_header = _compiled_json_header
else:
    _json_header = py_json_header


def _binary_header(buf: bytes, at: int, end: int, layouts: Layouts | None) -> Command:
    """The ROCKETMQ header in ``buf[at:end]``, read entry by entry (its layout learnt)."""
    try:
        if end - at < _BIN_FIXED.size + 4:
            raise FrameError(f"binary header of {end - at} bytes is too short")
        code, lang, version, opaque, flag, remark_len = _BIN_FIXED.unpack_from(buf, at)
        at += _BIN_FIXED.size
        if remark_len < 0 or at + remark_len + 4 > end:
            raise FrameError(f"remark length {remark_len} runs past the header")
        remark = buf[at:at + remark_len].decode("utf-8") if remark_len else None
        at += remark_len
        (ext_len,) = _I32.unpack_from(buf, at)
        at += 4
        if ext_len < 0 or at + ext_len > end:
            raise FrameError(f"extFields length {ext_len} runs past the header")
        # only a header without a remark, whose map fills the rest of it, has a layout to learn
        learn = layouts if layouts is not None and not remark_len and at + ext_len == end else None
        ext = _ext_map(buf[at:at + ext_len], learn)
    except struct.error as e:
        raise FrameError(f"binary header too short: {e}") from None
    except UnicodeDecodeError as e:
        raise FrameError(f"binary header holds invalid UTF-8: {e}") from None
    return _command(code, _LANG_NAMES.get(lang, "OTHER"), version, opaque, flag, remark, ext, None, ROCKETMQ)


def _command(code, language, version, opaque, flag, remark, ext, fields, serialize_type) -> Command:
    """A decoded ``Command``, its slots set directly (the keyword constructor costs twice as much)."""
    cmd = _new(Command)
    cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag = code, language, version, opaque, flag
    cmd.remark, cmd._ext, cmd.fields, cmd.body, cmd.serialize_type = remark, ext, fields, b"", serialize_type
    return cmd


_new = object.__new__


def _ext_map(raw: bytes, layouts: Layouts | None = None) -> dict:
    """extFields of a binary header: (i16 key length, key, i32 value length, value)...; empty
    keys and values are dropped, as Java does.  An all-ASCII map (the usual case) is decoded
    once and sliced, instead of two decodes per entry; its layout goes to ``layouts``."""
    ext, at, n = {}, 0, len(raw)
    text = raw.decode("latin-1") if raw.isascii() else None
    k16, v32 = _I16.unpack_from, _I32.unpack_from
    lens: list[tuple[str, int]] | None = [] if text is not None and layouts is not None and layouts.learning else None
    while at < n:
        (klen,) = k16(raw, at)
        key = at + 2
        (vlen,) = v32(raw, key + klen)
        val = key + klen + 4
        at = val + vlen
        if klen < 0 or vlen < 0 or at > n:
            raise FrameError("extFields entry runs past its map")
        if klen and vlen:
            if text is not None:
                ext[text[key:key + klen]] = text[val:at]
            else:
                ext[raw[key:key + klen].decode("utf-8")] = raw[val:at].decode("utf-8")
        if lens is not None and text is not None:
            lens.append((text[key:key + klen], vlen))
    if lens is not None and layouts is not None:
        layouts.learn(n, lens)
    return ext


class Layouts:
    """The binary header layouts one connection's clients send, by the header's byte length.

    A client sends the same keys in the same order request after request, and most values keep
    their length (a queue id, a timestamp, a message's UNIQ_KEY).  For a header without a remark
    whose extFields map has such a layout, one ``struct`` unpack cuts the whole header into its
    fixed fields, the map's values, and the bytes between the values (each entry's key with its
    length fields); comparing those with the layout's proves the header has that layout: no loop
    over entries.  A header of another layout (or whose map holds non-ASCII bytes) is read entry
    by entry, and its layout is learnt, up to ``MAX`` per connection."""

    MAX = 16                    # layouts learnt per connection (each ~3-5 KB)

    def __init__(self):
        self.by_size: dict[int, tuple] = {}     # header bytes -> (struct, bytes between values, names)
        self.learnt = 0

    @property
    def learning(self) -> bool:
        return self.learnt < self.MAX

    def match(self, buf: bytes, at: int, size: int) -> Command | None:
        """The command of the ``size``-byte header at ``buf[at]`` if it has a known layout, else None."""
        known = self.by_size.get(size)
        if known is None:
            return None
        layout, between, names = known
        t = layout.unpack_from(buf, at)
        if t[5::2] != between or not buf[at + _MAP_AT:at + size].isascii():
            return None
        return _command(t[0], _LANG_NAMES.get(t[1], "OTHER"), t[2], t[3], t[4], None, None, (names, t[6::2]),
                        ROCKETMQ)

    def learn(self, map_len: int, entries: list[tuple[str, int]]) -> None:
        """Remember the layout of a header without a remark whose ASCII map of ``map_len`` bytes
        holds these (key, value length) entries in order.  A map with an empty key or value is not
        learnt (Java drops those entries), nor an empty one."""
        if not entries or any(not k or not v for k, v in entries):
            return
        self.learnt += 1
        lead = struct.pack(">ii", 0, map_len)              # the remark's length (none), the map's
        between, fmt = [], [_BIN_FIXED.format[:-1]]         # the fixed fields but the remark's length
        for k, v in entries:
            kb = k.encode()
            between.append(lead + _I16.pack(len(kb)) + kb + _I32.pack(v))
            fmt += ["%ds%ds" % (len(between[-1]), v)]
            lead = b""
        self.by_size[_MAP_AT + map_len] = (struct.Struct("".join(fmt)), tuple(between), tuple(k for k, _ in entries))


_MAP_AT = _BIN_FIXED.size + 4           # where a header without a remark has its extFields map


def _frame(buf: bytes, at: int, end: int, layouts: Layouts | None = None) -> Command:
    """The frame in ``buf[at:end]``, after its length field."""
    if end - at < 4:
        raise FrameError(f"frame of {end - at} bytes has no header length")
    (lt,) = _I32.unpack_from(buf, at)
    stype, hlen = (lt >> 24) & 0xFF, lt & 0xFFFFFF
    at += 4
    if hlen > end - at:
        raise FrameError(f"header length {hlen} runs past the {end - at + 4}-byte frame")
    if stype == ROCKETMQ:
        cmd = layouts.match(buf, at, hlen) if layouts is not None else None
        if cmd is None:
            cmd = _binary_header(buf, at, at + hlen, layouts)
    elif stype == JSON:
        cmd = _json_header(buf[at:at + hlen])
    else:
        raise FrameError(f"unknown serialize type {stype}")
    cmd.body = buf[at + hlen:end]
    return cmd


def decode_frame(frame: bytes) -> Command:
    """One frame without its 4-byte length prefix."""
    frame = bytes(frame)
    return _frame(frame, 0, len(frame))


class Decoder:
    """Frames out of a byte stream.  After a ``FrameError`` the stream is unusable.

    Frames are parsed straight out of the bytes a read returned; only an unfinished frame's
    bytes are kept, and they are joined with what follows once the frame is complete."""

    def __init__(self, max_frame: int = MAX_FRAME):
        self.buf = bytearray()          # an unfinished frame's bytes
        self.need = 4                   # how many it must reach before parsing resumes
        self.max_frame = max_frame
        self.layouts = Layouts()        # this stream's extFields layouts

    def feed(self, data: bytes) -> list[Command]:
        if type(data) is not bytes:
            data = bytes(data)
        if self.buf:
            self.buf += data
            if len(self.buf) < self.need:
                return []
            data, self.buf = bytes(self.buf), bytearray()
        out, at, n = [], 0, len(data)
        while n - at >= 4:
            (length,) = _I32.unpack_from(data, at)
            if length < 4 or length + 4 > self.max_frame:
                raise FrameError(self._bad_length(length, data[at:at + 16]))
            if n - at - 4 < length:
                break
            out.append(_frame(data, at + 4, at + 4 + length, self.layouts))
            at += 4 + length
        if at < n:
            self.buf = bytearray(data[at:])
            self.need = 4 + _I32.unpack_from(data, at)[0] if n - at >= 4 else 4
        return out

    def _bad_length(self, length: int, head: bytes) -> str:
        if head.startswith(b"PRI * HTTP/2"):
            return "HTTP/2 preface, not a remoting frame (a RocketMQ 5.x gRPC client?)"
        if length < 4:
            return f"frame length {length} is too small for a header"
        return f"frame length {length} exceeds the {self.max_frame}-byte limit (first bytes {bytes(head[:8]).hex()})"


# ---------------------------------------------------------------- encode

def _json_bytes(cmd: Command) -> bytes:
    h = {"code": cmd.code, "extFields": cmd.ext, "flag": cmd.flag, "language": cmd.language,
         "opaque": cmd.opaque, "serializeTypeCurrentRPC": "JSON", "version": cmd.version}
    if cmd.remark is not None:
        h["remark"] = cmd.remark
    return json.dumps(h, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


_KEY_PREFIX: dict[str, bytes] = {}      # our own extFields names: i16 length + UTF-8, encoded once


def _key_prefix(k: str) -> bytes:
    p = _KEY_PREFIX.get(k)
    if p is None:
        kb = k.encode("utf-8")
        p = _I16.pack(len(kb)) + kb
        if len(_KEY_PREFIX) < 1024:
            _KEY_PREFIX[k] = p
    return p


def _ext_bytes(ext: dict) -> bytes:
    """A binary header's extFields map: (i16 key length, key, i32 value length, value)..."""
    parts: list[bytes] = []
    for k, v in ext.items():
        if v is not None:
            vb = (v if type(v) is str else str(v)).encode("utf-8")
            parts += (_key_prefix(k), _I32.pack(len(vb)), vb)
    return b"".join(parts)


def _binary_bytes(cmd: Command) -> bytes:
    remark = cmd.remark.encode("utf-8") if cmd.remark else b""
    ext = _ext_bytes(cmd.ext)
    lang = _LANG_CODES.get(cmd.language, LanguageCode.OTHER.value)
    return (_BIN_FIXED.pack(cmd.code, lang, cmd.version, cmd.opaque, cmd.flag, len(remark)) + remark
            + _I32.pack(len(ext)) + ext)


def _framed(stype: int, header: bytes, body: bytes) -> bytes:
    return _PREFIX.pack(4 + len(header) + len(body), (stype << 24) | len(header)) + header + body


def encode(cmd: Command) -> bytes:
    header = _binary_bytes(cmd) if cmd.serialize_type == ROCKETMQ else _json_bytes(cmd)
    return _framed(cmd.serialize_type, header, cmd.body)


class ResponseTemplate:
    """Responses of one shape, encoded without a ``Command``: extFields ``keys`` (values given
    per response) then ``static`` (fixed), everything else as ``Command.response`` sets it.  The
    bytes are exactly ``encode(req.response(code, remark, ext))``'s, in either serialization.
    The fixed parts are encoded once, and a binary header's once per remark and run of value
    lengths (``_bin_shape``), so a binary response is one pack and one ``%``.  For the replies
    sent per request: a send's, a pull's."""

    SHAPES = 256        # (remark, value lengths) remembered: a pull's offsets gain a digit now and then

    def __init__(self, keys: tuple[str, ...], static: dict[str, str]):
        enc = json.encoder.encode_basestring        # json.dumps' own, for ensure_ascii=False
        self._json_keys = tuple(("," if i else "") + enc(k) + ":" for i, k in enumerate(keys))
        tail = json.dumps(static, separators=(",", ":"), ensure_ascii=False)[1:-1]
        self._json_static = ("," + tail if keys and tail else tail)
        self._json_end = (f'}},"flag":{RPC_RESPONSE},"language":"JAVA","opaque":')
        self._json_version = f',"serializeTypeCurrentRPC":"JSON","version":{SERVER_VERSION}'
        self._json_ascii = ('{"code":%d,"extFields":{' + "".join(k.replace("%", "%%") + '"%s"' for k in self._json_keys)
                            + (self._json_static + self._json_end).replace("%", "%%") + "%d"
                            + self._json_version + "}").encode("utf-8")
        self._bin_keys = tuple(_key_prefix(k) for k in keys)
        self._bin_static = _ext_bytes(static)
        self._lang = _LANG_CODES["JAVA"]
        self._bin_shapes: dict[tuple, tuple[int, int, bytes]] = {}

    def _bin_shape(self, shape: tuple) -> tuple[int, int, bytes]:
        """For ``(remark, *value byte lengths)``: the header's length, the remark's, and what
        follows the header's fixed fields as a ``%`` template with a ``%s`` for each value (the
        remark, every length field and key filled in)."""
        remark, lens = shape[0], shape[1:]
        rb = remark.encode("utf-8") if remark else b""
        ext_len = sum(len(k) + 4 + n for k, n in zip(self._bin_keys, lens)) + len(self._bin_static)
        pieces, lead = [], rb + _I32.pack(ext_len)
        for k, n in zip(self._bin_keys, lens):
            pieces.append(lead + k + _I32.pack(n))
            lead = b""
        pieces.append(lead + self._bin_static)
        if len(self._bin_shapes) >= self.SHAPES:
            self._bin_shapes.clear()
        got = self._bin_shapes[shape] = (_BIN_FIXED.size + len(rb) + 4 + ext_len, len(rb),
                                         b"%s".join(p.replace(b"%", b"%%") for p in pieces))
        return got

    def encode(self, req: Command, code: int, remark: str | None, values: tuple[str, ...], body=()) -> bytes:
        """The response as one frame (``body``: its pieces, bytes-likes, joined into it)."""
        pieces = self.encode_pieces(req, code, remark, values, body)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def encode_pieces(self, req: Command, code: int, remark: str | None, values: tuple[str, ...], body=()) -> list:
        """The response as its frame's head (length fields, header) followed by ``body``'s
        pieces as given: written with one ``writelines`` (a writev), a pull's views of the
        CommitLog go to the socket without a copy of their own."""
        body_len = sum(map(len, body)) if body else 0
        if req.serialize_type == ROCKETMQ:
            return [self._binary(req.opaque, code, remark, tuple([v.encode("utf-8") for v in values]), body_len),
                    *body]
        enc = json.encoder.encode_basestring
        ext = "".join([k + enc(v) for k, v in zip(self._json_keys, values)])
        remark = "" if remark is None else ',"remark":' + enc(remark)
        header = (f'{{"code":{code},"extFields":{{{ext}{self._json_static}{self._json_end}{req.opaque}'
                  f'{self._json_version}{remark}}}').encode("utf-8")
        return [_PREFIX.pack(4 + len(header) + body_len, (JSON << 24) | len(header)) + header, *body]

    def encode_ascii(self, req: Command, code: int, values: tuple[bytes, ...]) -> bytes:
        """``encode`` of a response without a remark or body whose values are ASCII that JSON
        need not escape (digits, hex: a stored send's), formatted as bytes straight into either
        serialization's header: no ``str`` per value, no escaping."""
        if req.serialize_type == ROCKETMQ:
            return self._binary(req.opaque, code, None, values)
        header = self._json_ascii % (code, *values, req.opaque)
        return _PREFIX.pack(4 + len(header), (JSON << 24) | len(header)) + header

    def _binary(self, opaque: int, code: int, remark: str | None, values: tuple[bytes, ...], body_len: int = 0
                ) -> bytes:
        """A ROCKETMQ-serialized response to request ``opaque``, its values UTF-8: the frame up
        to its body, of ``body_len`` bytes."""
        shape = (remark, *map(len, values))
        hlen, rlen, rest = self._bin_shapes.get(shape) or self._bin_shape(shape)
        return _BIN_FRAME_HEAD.pack(4 + hlen + body_len, (ROCKETMQ << 24) | hlen, code, self._lang, SERVER_VERSION,
                                    opaque, RPC_RESPONSE, rlen) + rest % values
