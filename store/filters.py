"""A consumer's filter as the store applies it (FACTS §10): a TAG expression as the hash codes the
consume queue holds (``tag_codes``), an SQL92 one as a predicate on a record's properties
(``sql_filter``), each compiled once per expression.  The readers' pulls and the gRPC front's
receives use them with ``StoreView.pull``."""
from __future__ import annotations

import functools

from rocketbox.remoting import sql92
from rocketbox.remoting.subscription import parse_expression
from rocketbox.store import message
from rocketbox.store.javahash import string_hash


@functools.lru_cache(maxsize=1024)
def tag_codes(expression: str | None) -> tuple[int, ...] | None:
    """``TagA || TagB`` -> their hash codes; None (no filter) for ``*`` or empty (FilterAPI).
    Kept per expression: a pull consumer sends its expression with every pull."""
    _expr, tags = parse_expression(expression)
    return tuple([string_hash(t) for t in tags]) or None


@functools.lru_cache(maxsize=1024)
def sql_filter(expression: str):
    """An SQL92 subscription compiled once (``remoting/sql92.py``) -> keep(properties bytes) for
    ``StoreView.pull``: only the properties it names are read out of each record's. SQLError
    when it does not parse."""
    predicate = sql92.compile(expression)
    names = {n: n.encode() for n in predicate.names}

    def keep(props: bytes) -> bool:
        def get(name: str) -> str | None:
            v = message.property_value(props, names.get(name) or name.encode())
            return None if v is None else v.decode("utf-8", "replace")
        return predicate(get)
    return keep
