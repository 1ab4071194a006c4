"""SQL92 property filters (FACTS-wave2 §6; filter:parser/SelectorParser.jj and
filter:expression/*.java of 4.9.8): ``MessageSelector.bySql("a > 5 AND b = 'x'")``.

``compile(text)`` parses an expression once into a predicate over a message's properties
(``get(name) -> str | None``, so only the properties it names are looked up), or raises
``SQLError`` naming what it could not parse. The grammar 4.9.8 accepts: ``= <> > >= < <=``,
``[NOT] BETWEEN a AND b``, ``[NOT] IN ('s', ...)`` (string literals, a property on the left),
``IS [NOT] NULL``, ``AND OR NOT``, unary ``+ -``, parentheses; literals ``'str'`` (``''`` is a
quote), decimals (an ``L`` suffix allowed), floats (``5.``, ``.5``, ``5E10``), ``TRUE``, ``FALSE``,
``NULL``; identifiers ``[a-zA-Z_$][a-zA-Z0-9_$.]*``; keywords in any case; ``--`` and ``/* */``
comments.

Its values as 4.9.8's: a property is a string or NULL (absent). A comparison with a number reads
the property as that number (``"10" > 5`` is true), with a boolean as ``Boolean.valueOf``; a
string that is not a number makes the whole evaluation fail, which is no match. ``<``, ``>``,
``<=``, ``>=`` between two strings compare them as numbers. NULL on either side of a comparison,
``NOT NULL`` and ``IN`` of NULL are NULL; ``AND`` and ``OR`` follow SQL's three-valued logic; only
TRUE matches. The constants of ``<``, ``>``, ``<=``, ``>=`` and ``BETWEEN`` must be numbers
(``Value 'x' cannot be compared.`` otherwise, at compile time, as 4.9.8).

Bounds, beyond 4.9.8: an expression is at most ``MAX_LENGTH`` characters, nests at most
``MAX_DEPTH`` deep and has at most ``MAX_IN`` values in one IN list (a ``SQLError`` past them).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

MAX_LENGTH, MAX_DEPTH, MAX_IN = 16384, 64, 1024
Getter = Callable[[str], "str | None"]


class Predicate:
    """A compiled expression: called with a message's property getter -> whether it matches;
    ``names``: the properties it reads."""
    __slots__ = ("expr", "names")

    def __init__(self, expr, names: frozenset[str]):
        self.expr, self.names = expr, names

    def __call__(self, get: Getter) -> bool:
        try:
            return self.expr(get) is True
        except (_Fail, RecursionError):
            return False

_TOKEN = re.compile(r"""
    (?P<ws>\s+|--[^\n]*|/\*.*?\*/)
  | (?P<str>'(?:[^']|'')*')
  | (?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<int>\d+[lL]?)
  | (?P<id>[a-zA-Z_$][a-zA-Z0-9_$.]*)
  | (?P<op><>|>=|<=|=|>|<|\(|\)|,|\+|-)
""", re.X | re.S)
_KEYWORDS = {"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"}


class SQLError(ValueError):
    """An expression 4.9.8's parser refuses, or one past this module's bounds."""


class _Fail(Exception):
    """An evaluation that cannot go on (a string that is not a number): no match."""


def _tokens(text: str) -> list[tuple[str, Any, int]]:
    if len(text) > MAX_LENGTH:
        raise SQLError(f"the expression is {len(text)} characters long, more than {MAX_LENGTH}")
    out: list[tuple[str, Any, int]] = []
    at = 0
    while at < len(text):
        m = _TOKEN.match(text, at)
        if m is None:
            raise SQLError(f"Lexical error at line 1, column {at + 1}.  Encountered: {text[at]!r}")
        kind, value = m.lastgroup, m.group()
        if kind == "str":
            out.append(("lit", value[1:-1].replace("''", "'"), at))
        elif kind == "float":
            out.append(("lit", float(value), at))
        elif kind == "int":
            out.append(("lit", int(value.rstrip("lL")), at))
        elif kind == "id":
            upper = value.upper()
            if upper in ("TRUE", "FALSE"):
                out.append(("lit", upper == "TRUE", at))
            elif upper == "NULL":
                out.append(("lit", None, at))
            elif upper in _KEYWORDS:
                out.append(("kw", upper, at))
            else:
                out.append(("id", value, at))
        elif kind == "op":
            out.append(("op", value, at))
        at = m.end()
    out.append(("end", None, len(text)))
    return out


class _Parser:
    """Recursive descent over the tokens, building closures: (get) -> True / False / None."""

    def __init__(self, text: str):
        self.toks, self.i, self.depth = _tokens(text), 0, 0

    def peek(self, kind: str, value: Any = None) -> bool:
        k, v, _ = self.toks[self.i]
        return k == kind and (value is None or v == value)

    def take(self, kind: str, value: Any = None) -> Any:
        k, v, at = self.toks[self.i]
        if k != kind or (value is not None and v != value):
            shown = "<EOF>" if k == "end" else repr(v) if k == "lit" else str(v)
            raise SQLError(f"Encountered \"{shown}\" at line 1, column {at + 1}. Was expecting {value or kind}")
        self.i += 1
        return v

    def parse(self):
        expr = self.or_expr()
        self.take("end")
        return expr

    def _nest(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise SQLError(f"the expression nests deeper than {MAX_DEPTH}")

    def or_expr(self):
        left = self.and_expr()
        while self.peek("kw", "OR"):
            self.take("kw")
            left = _or(left, self.and_expr())
        return left

    def and_expr(self):
        left = self.not_expr()
        while self.peek("kw", "AND"):
            self.take("kw")
            left = _and(left, self.not_expr())
        return left

    def not_expr(self):
        if self.peek("kw", "NOT"):
            self.take("kw")
            self._nest()
            inner = self.not_expr()
            self.depth -= 1
            return _not(inner)
        return self.comparison()

    def comparison(self):
        left, is_property = self.value()
        if self.peek("op") and self.toks[self.i][1] in ("=", "<>", ">", ">=", "<", "<="):
            op = self.take("op")
            right, _ = self.value()
            if op in (">", ">=", "<", "<="):
                _numeric_constant(left)
                _numeric_constant(right)
            return _compare(op, left, right)
        negate = False
        if self.peek("kw", "IS"):
            self.take("kw")
            negate = self.peek("kw", "NOT")
            if negate:
                self.take("kw")
            if not self.peek("lit") or self.toks[self.i][1] is not None:
                self.take("lit", "NULL")                      # (raises, naming what came instead)
            self.take("lit")
            return _is_null(left, negate)
        if self.peek("kw", "NOT"):
            self.take("kw")
            negate = True
        if self.peek("kw", "BETWEEN"):
            self.take("kw")
            low, _ = self.value()
            self.take("kw", "AND")
            high, _ = self.value()
            for v in (left, low, high):
                _numeric_constant(v)
            return _between(left, low, high, negate)
        if self.peek("kw", "IN"):
            if not is_property:
                raise SQLError("IN needs a property on its left")
            self.take("kw")
            self.take("op", "(")
            values = {self._string()}
            while self.peek("op", ","):
                self.take("op")
                values.add(self._string())
                if len(values) > MAX_IN:
                    raise SQLError(f"an IN list holds more than {MAX_IN} values")
            self.take("op", ")")
            return _in(left, frozenset(values), negate)
        if negate:
            raise SQLError(f"Encountered NOT at column {self.toks[self.i - 1][2] + 1} without BETWEEN or IN after it")
        return left

    def _string(self) -> str:
        v = self.take("lit")
        if not isinstance(v, str):
            raise SQLError(f"IN takes string literals only, not {v!r}")
        return v

    def value(self):
        """-> (a value closure, whether it is a bare property)."""
        if self.peek("op", "("):
            self.take("op")
            self._nest()
            inner = self.or_expr()
            self.depth -= 1
            self.take("op", ")")
            return inner, False
        if self.peek("op", "-") or self.peek("op", "+"):
            sign = self.take("op")
            self._nest()
            inner, _ = self.value()
            self.depth -= 1
            const = getattr(inner, "constant", _NOT_CONST)
            if const is not _NOT_CONST:
                if isinstance(const, bool) or not isinstance(const, (int, float)):
                    raise SQLError(f"a sign before {const!r}")
                return _constant(-const if sign == "-" else const), False
            return _negate(inner) if sign == "-" else inner, False
        if self.peek("lit"):
            return _constant(self.take("lit")), False
        name = self.take("id")
        return _property(name), True


_NOT_CONST = object()
_LONG = re.compile(r"[+-]?\d+")


def _constant(v):
    def f(_get):
        return v
    f.constant = v          # type: ignore[attr-defined]
    return f


def _property(name: str):
    def f(get):
        return get(name)
    f.property = name       # type: ignore[attr-defined]
    return f


def _numeric_constant(f) -> None:
    c = getattr(f, "constant", _NOT_CONST)
    if c is not _NOT_CONST and (isinstance(c, bool) or not isinstance(c, (int, float))):
        raise SQLError(f"Value '{c}' cannot be compared.")


def _negate(inner):
    def f(get):
        v = inner(get)
        if v is None:
            return None
        return -_number(v, 0)
    return f


def _number(v, like):
    """``v`` as a number of ``like``'s kind (a property string converted as Java's valueOf)."""
    if isinstance(v, bool):
        raise _Fail()
    if isinstance(v, (int, float)):
        return v
    try:
        if isinstance(like, float):
            return float(v)                     # Double.valueOf
        if _LONG.fullmatch(v):                  # Long.valueOf
            return int(v)
    except ValueError:
        pass
    raise _Fail()


def _coerce(lv, rv):
    """The two sides made comparable as 4.9.8's ComparisonExpression makes them, or _Fail."""
    if type(lv) is type(rv) or (isinstance(lv, (int, float)) and isinstance(rv, (int, float))
                                and not isinstance(lv, bool) and not isinstance(rv, bool)):
        return lv, rv
    if isinstance(lv, str) and isinstance(rv, bool):
        return lv.lower() == "true", rv
    if isinstance(rv, str) and isinstance(lv, bool):
        return lv, rv.lower() == "true"
    if isinstance(lv, str):
        return _number(lv, rv), rv
    if isinstance(rv, str):
        return lv, _number(rv, lv)
    raise _Fail()


def _compare(op: str, left, right):
    def f(get):
        lv, rv = left(get), right(get)
        if lv is None or rv is None:
            return None
        if op in ("=", "<>"):
            if isinstance(lv, str) != isinstance(rv, str):
                lv, rv = _coerce(lv, rv)                # a string against a number or boolean
            same = lv == rv and isinstance(lv, bool) == isinstance(rv, bool)   # (True is not 1)
            return same if op == "=" else not same
        if isinstance(lv, str) and isinstance(rv, str):
            lv, rv = _number(lv, 0.0), _number(rv, 0.0)
        else:
            lv, rv = _coerce(lv, rv)
        if isinstance(lv, bool) or isinstance(rv, bool):
            raise _Fail()
        return {">": lv > rv, ">=": lv >= rv, "<": lv < rv, "<=": lv <= rv}[op]
    return f


def _between(x, low, high, negate: bool):
    ge, le = _compare(">=", x, low), _compare("<=", x, high)
    inside = _and(ge, le)
    return _not(inside) if negate else inside


def _in(x, values: frozenset, negate: bool):
    def f(get):
        v = x(get)
        if v is None:
            return None
        if not isinstance(v, str):
            raise _Fail()
        return (v in values) != negate
    return f


def _is_null(x, negate: bool):
    def f(get):
        return (x(get) is None) != negate
    return f


def _truth(v):
    if v is None or isinstance(v, bool):
        return v
    raise _Fail()                 # a value where a condition is wanted (``a AND 5``)


def _connective(a, b, decides: bool):
    """SQL's three-valued AND (``decides`` False: one FALSE makes it FALSE) and OR (True)."""
    def f(get):
        x = _truth(a(get))
        if x is decides:
            return decides
        y = _truth(b(get))
        if y is decides:
            return decides
        return None if x is None or y is None else not decides
    return f


def _and(a, b):
    return _connective(a, b, False)


def _or(a, b):
    return _connective(a, b, True)


def _not(a):
    def f(get):
        x = _truth(a(get))
        return None if x is None else not x
    return f


def compile(text: str) -> Predicate:  # noqa: A001  (the module's verb: compile an expression)
    """The predicate of the SQL92 expression ``text``: True only when it evaluates to TRUE for a
    message whose properties ``get`` returns. SQLError when it does not parse."""
    if not text or not text.strip():
        raise SQLError("the expression is empty")
    return Predicate(_Parser(text).parse(), _names(text))


def _names(text: str) -> frozenset[str]:
    """The property names an expression reads (the identifiers that are not keywords)."""
    return frozenset(v for k, v, _ in _tokens(text) if k == "id")
