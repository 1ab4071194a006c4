"""SQL92 property filters: the grammar 4.9.8 accepts, its NULL and type rules, and its bounds
(remoting/sql92.py; FACTS-wave2 §6)."""
import pytest

from rocketbox.remoting import sql92

MSG = {"a": "10", "b": "x", "c": "3.5", "TAGS": "TagA", "flag": "true", "name": "O'Brien", "neg": "-4"}


def match(text: str, props: dict | None = None) -> bool:
    p = MSG if props is None else props
    return sql92.compile(text)(p.get)


@pytest.mark.parametrize("text, want", [
    ("a > 5 AND b = 'x'", True), ("a > 5 and b = 'y'", False), ("a = 10", True), ("a <> 10", False),
    ("a >= 10 AND a <= 10", True), ("a < 10.5", True), ("c > 3", False),          # "3.5" is no Long
    ("c > 3.0", True), ("a BETWEEN 5 AND 15", True), ("a NOT BETWEEN 5 AND 15", False),
    ("b IN ('x', 'y')", True), ("b NOT IN ('x', 'y')", False), ("TAGS IN ('TagA')", True),
    ("missing IS NULL", True), ("a IS NOT NULL", True), ("missing IS NOT NULL", False),
    ("missing = 'x'", False), ("NOT (missing = 'x')", False),                       # NULL is no match
    ("missing = 'x' OR a = 10", True), ("missing = 'x' AND a = 10", False),
    ("NOT a = 11", True), ("flag = TRUE", True), ("flag = FALSE", False),
    ("name = 'O''Brien'", True), ("neg < -3", True), ("neg = -4L", True),
    ("b > 5", False),                                       # 'x' is not a number: the evaluation fails
    ("b > 5 OR a = 10", False),                             # and takes the whole expression with it
    ("(a > 5) AND ((b = 'x'))", True), ("a > 5 -- a comment", True), ("/* c */ a > 5", True),
    ("a = '10'", True), ("a > neg", True),                 # two properties compared as numbers by < >
])
def test_expressions_evaluate_as_4_9_8_evaluates_them(text, want):
    assert match(text) is want


@pytest.mark.parametrize("text, why", [
    ("", "empty"), ("a >", "Encountered"), ("a > 'x'", "cannot be compared"), ("a BETWEEN 'a' AND 5", "cannot be compared"),
    ("5 IN ('a')", "property"), ("a IN (1, 2)", "string literals"), ("a = 5 AND", "Encountered"),
    ("a # 5", "Lexical error"), ("a IS 5", "NULL"), ("a NOT 5", "BETWEEN or IN"),
    ("(" * 100 + "a = 1" + ")" * 100, "nests deeper"), ("a IN (" + ",".join(f"'{i}'" for i in range(2000)) + ")", "more than"),
    ("a = '" + "x" * 20000 + "'", "characters long"),
])
def test_what_4_9_8_refuses_and_what_is_too_big_is_refused_naming_why(text, why):
    with pytest.raises(sql92.SQLError) as e:
        sql92.compile(text)
    assert why in str(e.value)


def test_only_the_named_properties_are_looked_up():
    asked = []

    def get(name):
        asked.append(name)
        return MSG.get(name)
    pred = sql92.compile("a > 5 AND b = 'x'")
    assert pred(get) and sorted(asked) == ["a", "b"] and pred.names == frozenset({"a", "b"})
