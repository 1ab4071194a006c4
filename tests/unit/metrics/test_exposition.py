"""Prometheus' text format as the metrics role writes it, and its HTTP answers (metrics/exposition.py,
metrics/service.answer): bytes checked against the format's rules."""
from __future__ import annotations

import math

import pytest

from rocketbox.metrics.exposition import CONTENT_TYPE, Family, render
from rocketbox.metrics.service import answer


def test_counters_and_gauges_are_written_with_help_type_and_escaped_labels():
    c = Family("rocketmq_messages_in_total", "counter", "Messages in\nthe topic \\ total")
    c.add(12, topic='a"b\\c\nd', cluster="C")
    g = Family("rocketbox_disk_used_ratio", "gauge", "ratio").add(0.25, partition="commitlog").add(-1.0, partition="x")
    assert render([c, g]).decode() == (
        "# HELP rocketmq_messages_in_total Messages in\\nthe topic \\\\ total\n"
        "# TYPE rocketmq_messages_in_total counter\n"
        'rocketmq_messages_in_total{topic="a\\"b\\\\c\\nd",cluster="C"} 12\n'
        "# HELP rocketbox_disk_used_ratio ratio\n"
        "# TYPE rocketbox_disk_used_ratio gauge\n"
        'rocketbox_disk_used_ratio{partition="commitlog"} 0.25\n'
        'rocketbox_disk_used_ratio{partition="x"} -1.0\n')


def test_a_histogram_is_cumulative_and_ends_at_inf_with_its_sum_and_count():
    h = Family("rocketmq_message_size", "histogram", "sizes", buckets=(1024, 4096))
    h.add(([3, 1, 2], 20000.5), topic="t")
    assert render([h]).decode().splitlines()[2:] == [
        'rocketmq_message_size_bucket{topic="t",le="1024.0"} 3',
        'rocketmq_message_size_bucket{topic="t",le="4096.0"} 4',
        'rocketmq_message_size_bucket{topic="t",le="+Inf"} 6',
        'rocketmq_message_size_sum{topic="t"} 20000.5',
        'rocketmq_message_size_count{topic="t"} 6']


def test_special_numbers_are_spelled_as_prometheus_reads_them():
    g = Family("x", "gauge", "h").add(math.inf).add(-math.inf).add(math.nan)
    assert render([g]).decode().splitlines()[2:] == ["x +Inf", "x -Inf", "x NaN"]


@pytest.mark.parametrize("name,kind", [("1bad", "gauge"), ("a-b", "gauge"), ("ok", "summary")])
def test_a_bad_family_is_refused_when_made(name, kind):
    with pytest.raises(ValueError):
        Family(name, kind, "h")


@pytest.mark.parametrize("label", ["__reserved", "bad-name", "0x"])
def test_a_bad_label_name_is_refused(label):
    with pytest.raises(ValueError):
        Family("x", "gauge", "h").add(1, **{label: "v"})


def _split(response: bytes) -> tuple[str, dict, bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    status, *fields = head.decode().split("\r\n")
    return status, dict(f.split(": ", 1) for f in fields), body


def test_get_metrics_answers_the_scrape_with_its_length_and_type():
    status, fields, body = _split(answer(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", lambda: b"x 1\n"))
    assert status == "HTTP/1.1 200 OK" and body == b"x 1\n"
    assert fields["Content-Type"] == CONTENT_TYPE and fields["Content-Length"] == "4" and fields["Connection"] == "close"


def test_head_gets_the_headers_only_and_other_paths_and_methods_are_refused():
    status, fields, body = _split(answer(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n", lambda: b"x 1\n"))
    assert (status, fields["Content-Length"], body) == ("HTTP/1.1 200 OK", "4", b"")
    assert _split(answer(b"GET /nope HTTP/1.1\r\n\r\n", lambda: b""))[0] == "HTTP/1.1 404 Not Found"
    status, fields, _ = _split(answer(b"POST /metrics HTTP/1.1\r\n\r\n", lambda: b""))
    assert status == "HTTP/1.1 405 Method Not Allowed" and fields["Allow"] == "GET, HEAD"
    assert _split(answer(b"\x16\x03\x01 garbage\r\n\r\n", lambda: b""))[0] == "HTTP/1.1 400 Bad Request"
