"""machinery.metrics: the servers' /metrics without prometheus_client. The text is compared line for line with
what prometheus_client's generate_latest writes for the same updates (less its `_created` series, which
kube-apiserver does not export either), and parsed back by prometheus_client's parser."""
import math
import random

import prometheus_client as pc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from machinery import metrics as m


def _without_created(text: str) -> str:
    out, skip = [], False
    for line in text.splitlines():
        if line.startswith("# HELP"):
            skip = line.split()[2].endswith("_created")
        if skip or line.split(" ", 1)[0].split("{", 1)[0].endswith("_created"):
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def test_text_is_prometheus_clients_without_created_series():
    theirs, ours = pc.CollectorRegistry(), m.Registry(process=False)

    def both(kind, *a, **k):
        return getattr(pc, kind)(*a, registry=theirs, **k), getattr(m, kind)(*a, registry=ours, **k)

    fams = [both("Counter", "apiserver_request_total", "Counter of requests\nwith a \\ in its help",
                 ["verb", "code", "a_label"]),
            both("Counter", "unlabelled_total", "a counter without labels"),
            both("Counter", "no_suffix", "a counter named without _total", ["x"]),
            both("Gauge", "objects", "a gauge", ["group", "resource"]),
            both("Gauge", "a_gauge", "a gauge without labels"),
            both("Histogram", "duration_seconds", "a histogram", ["verb", "resource"],
                 buckets=(0.005, 0.025, 0.1, 1, 2, 60, 1234567.0)),
            both("Histogram", "default_buckets", "a histogram without labels, default buckets")]
    rnd = random.Random(7)
    for _ in range(3000):
        a, b = rnd.choice(fams)
        values = [rnd.choice(["x", 'a "quoted" one', "new\nline", "back\\slash", "", "ünï"]) for _ in a._labelnames]
        ca, cb = (a.labels(*values), b.labels(*values)) if values else (a, b)
        if isinstance(a, pc.Histogram):
            v = rnd.choice([0.0, 0.001, 0.005, 0.0051, 0.5, 2, 59.9, 60, 1e7, 3e6])
            ca.observe(v)
            cb.observe(v)
        elif isinstance(a, pc.Gauge):
            op, v = rnd.choice(["set", "inc", "dec"]), rnd.choice([1, 0.25, rnd.random() * 1e9, 12345678.0])
            getattr(ca, op)(v)
            getattr(cb, op)(v)
        else:
            v = rnd.choice([1, 2.5, 1e6])
            ca.inc(v)
            cb.inc(v)
    assert ours.expose().decode() == _without_created(pc.generate_latest(theirs).decode())


def test_histogram_buckets_count_values_at_their_bound_and_parse_back():
    reg = m.Registry(process=False)
    h = m.Histogram("lat_seconds", "h", ["verb"], registry=reg, buckets=(0.1, 1))
    for v in (0.1, 0.2, 1.0, 5.0):
        h.labels(verb="GET").observe(v)
    fams = {f.name: f for f in text_string_to_metric_families(reg.expose().decode())}
    got = {(s.name, s.labels.get("le")): s.value for s in fams["lat_seconds"].samples}
    assert got[("lat_seconds_bucket", "0.1")] == 1     # le: a value equal to the bound counts in it
    assert got[("lat_seconds_bucket", "1.0")] == 3
    assert got[("lat_seconds_bucket", "+Inf")] == 4
    assert got[("lat_seconds_count", None)] == 4
    assert math.isclose(got[("lat_seconds_sum", None)], 6.3)


def test_children_are_found_by_values_as_given_or_as_strings():
    reg = m.Registry(process=False)
    c = m.Counter("codes_total", "c", ["code"], registry=reg)
    c.labels(200).inc()
    c.labels("200").inc()
    c.labels(code=200).inc(2)
    assert c.labels("200").get() == 4
    assert reg.expose().decode().count("codes_total{") == 1
    with pytest.raises(ValueError):
        c.labels("200").inc(-1)
    with pytest.raises(ValueError):
        c.labels("200", "extra")


def test_process_gauges_as_go_names_them():
    fams = {f.name: f for f in text_string_to_metric_families(m.Registry().expose().decode())}
    for name in ("process_resident_memory_bytes", "process_virtual_memory_bytes", "process_start_time_seconds",
                 "process_open_fds", "process_max_fds"):
        assert fams[name].type == "gauge" and fams[name].samples[0].value > 0, name
    assert fams["process_cpu_seconds"].type == "counter"
    assert fams["process_resident_memory_bytes"].documentation == "Resident memory size in bytes."


def test_a_name_registers_once():
    reg = m.Registry(process=False)
    m.Gauge("twice", "g", registry=reg)
    with pytest.raises(ValueError):
        m.Counter("twice", "c", registry=reg)
