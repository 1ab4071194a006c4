"""Prometheus' text exposition format (version 0.0.4), sans-IO: metric families in, bytes out.

    # HELP <name> <help, \\ and newline escaped>
    # TYPE <name> counter|gauge|histogram
    <name>{<label>="<value, \\ " and newline escaped>",...} <value>

A family's samples share its name (a histogram's: ``_bucket`` with ``le``, cumulative and ending
at ``+Inf``, then ``_sum`` and ``_count``).  Integers are written as integers, other numbers with
``repr`` (``+Inf``, ``-Inf``, ``NaN`` as Prometheus spells them).  Names and label names are
checked when a family is made: a bad one is our bug, not the scraper's.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
KINDS = ("counter", "gauge", "histogram")


def _number(v: float) -> str:
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _escape_label(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in labels.items()) + "}"


@dataclass
class Family:
    """One metric: its samples are (labels, value); a histogram's value is (bucket counts, sum),
    one count per bound of ``buckets`` plus the +Inf one, not cumulative."""
    name: str
    kind: str
    help: str
    buckets: tuple[float, ...] = ()
    samples: list[tuple[dict[str, str], object]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name) or self.kind not in KINDS:
            raise ValueError(f"bad metric family {self.name!r} ({self.kind})")
        if self.kind == "histogram" and list(self.buckets) != sorted(set(self.buckets)):
            raise ValueError(f"{self.name}: bucket bounds must rise")

    def add(self, value, **labels: str) -> "Family":
        for k in labels:
            if not _LABEL.match(k) or k.startswith("__") or (self.kind == "histogram" and k == "le"):
                raise ValueError(f"{self.name}: bad label name {k!r}")
        self.samples.append((labels, value))
        return self

    def lines(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help.replace(chr(92), chr(92) * 2).replace(chr(10), chr(92) + 'n')}",
               f"# TYPE {self.name} {self.kind}"]
        for labels, value in self.samples:
            if self.kind != "histogram":
                out.append(f"{self.name}{_labels(labels)} {_number(value)}")    # type: ignore[arg-type]
                continue
            counts: list[int]
            total: float
            counts, total = value                                                 # type: ignore[misc]
            running = 0
            for bound, n in zip((*self.buckets, math.inf), counts):
                running += n
                out.append(f"{self.name}_bucket{_labels({**labels, 'le': _number(float(bound))})} {running}")
            out.append(f"{self.name}_sum{_labels(labels)} {_number(total)}")
            out.append(f"{self.name}_count{_labels(labels)} {running}")
        return out


def render(families: list[Family]) -> bytes:
    """The families as one scrape's body."""
    lines: list[str] = []
    for f in families:
        lines += f.lines()
    return ("\n".join(lines) + "\n").encode("utf-8")
