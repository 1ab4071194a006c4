"""Subscription expressions (FACTS §3.9, common:filter/FilterAPI.java): ``TagA || TagB``, split on
``||``, trimmed, empties dropped; null, empty or ``*`` means every message.  Brokers filter on
the tags' hash codes, clients re-check the tag strings: both parse the expression here."""
from __future__ import annotations


def parse_expression(expression: str | None) -> tuple[str, list[str]]:
    """``TagA || TagB`` -> ("TagA || TagB", ["TagA", "TagB"]); ``*``/empty -> ("*", [])."""
    expr = (expression or "").strip()
    if expr in ("", "*"):
        return "*", []
    return expr, [t.strip() for t in expr.split("||") if t.strip()]
