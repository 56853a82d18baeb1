"""The recipes layer without running one: the catalog parses and every rung of the ladder and every axis has a
recipe; bad recipes are refused with the file and key named; upstream's SLO arithmetic (p99 over 5-minute
windows, Prometheus' histogram_quantile over scrape deltas, verdicts); the index answers from measured
capacities and says when a size is beyond them; the CLI's list and its errors."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from recipes import index, slo, spec
from recipes.client import Sample
from tests.helpers import ROOT


def test_catalog_has_every_rung_and_axis():
    rs = spec.load_all()
    rungs = {(r.rung, r.name) for r in rs if r.rung}
    assert rungs == {(1, "classic-ha"), (2, "role-split"), (3, "node-plane"), (4, "partitioned-store"),
                     (4, "store-split"), (5, "sharded-slice")}
    axes = {r.axis for r in rs if not r.rung}
    assert axes == {"node", "churn", "state"}
    # the rungs made of stock components only (and rung 4's store split without the node tier) also run with
    # kube-apiserver in place of ours
    assert {r.name for r in rs if "kube" in r.implementations} == {"classic-ha", "role-split", "store-split"}
    for r in rs:
        assert r.summary and r.workload and r.sizes["small"] < r.sizes["full"]
        assert sum(s.default for s in r.stores) == 1


def _doc(**over) -> dict:
    d = {"name": "bad", "axis": "node", "size": {"name": "nodes", "small": 1, "full": 2},
         "processes": [{"kind": "apiserver"}, {"kind": "kwok"}], "workload": [{"kind": "nodes", "nodes": "size"}]}
    d.update(over)
    return d


@pytest.mark.parametrize("over,message", [
    ({"axis": "diagonal"}, "axis must be one of"),
    ({"size": {"name": "nodes", "small": 1}}, "size.full is required"),
    ({"processes": [{"kind": "apiserver"}, {"kind": "kwok"}, {"kind": "etcd-operator"}]}, "is not one of"),
    ({"processes": [{"kind": "kwok"}]}, "exactly one apiserver or deployment"),
    ({"processes": [{"kind": "apiserver", "count": 0}, {"kind": "kwok"}]}, "count must be a positive integer"),
    ({"processes": [{"kind": "apiserver", "shards": 2}, {"kind": "kwok"}]}, "unknown keys ['shards']"),
    ({"implementations": ["kube"], "processes": [{"kind": "apiserver"}, {"kind": "nodetier"}, {"kind": "kwok"}]},
     "exist only in ours"),
    ({"stores": [{"name": "a"}, {"name": "b"}]}, "exactly one store must hold the default"),
    ({"stores": [{"name": "a"}, {"name": "b", "resources": ["/events"], "durability": "maybe"}]}, "durability"),
    ({"workload": [{"kind": "nodes", "nodes": "lots"}]}, "must be a number, 'size' or '<x>*size'"),
    ({"workload": [{"kind": "nodes", "nodez": 3}]}, "unknown keys ['nodez']"),
    ({"processes": [{"kind": "apiserver"}]}, "needs a kwok process"),
    ({"workload": [{"kind": "pods", "pods_per_second": 1}]}, "needs kube-scheduler and kube-controller-manager"),
    ({"colour": "blue"}, "unknown keys ['colour']"),
])
def test_bad_recipes_are_refused_with_the_key_named(over, message):
    with pytest.raises(spec.RecipeError, match=None) as e:
        spec.parse(_doc(**over), "bad.toml")
    assert message in str(e.value) and "bad.toml" in str(e.value)


def test_sizes_and_sized_parameters():
    r = spec.parse(_doc(), "bad.toml")
    assert r.size("small") == 1 and r.size("full") == 2 and r.size("300") == 300
    with pytest.raises(spec.RecipeError):
        r.size("huge")
    part = spec.Part("pods", {"deployments": "0.2*size", "replicas": 5, "namespaces": "size"})
    assert part.value("deployments", 100) == 20 and part.value("replicas", 100) == 5
    assert part.value("deployments", 1) == 1          # a scaled count is at least 1
    assert part.value("namespaces", 7) == 7


def test_p99_is_nearest_rank_and_windows_are_five_minutes():
    assert slo.p99([]) is None
    assert slo.p99([float(i) for i in range(1, 101)]) == 99.0
    assert slo.p99([0.1] * 98 + [2.0, 3.0]) == 2.0
    assert slo.windows(0, 30) == [(0, 30)]                          # a short run is one window
    assert slo.windows(0, 900) == [(0, 300), (300, 600), (600, 900)]
    assert slo.windows(0, 700) == [(0, 300), (300, 700)]            # the remainder joins the last


def test_histogram_quantile_over_scrape_deltas_as_prometheus():
    before = {0.05: 10, 0.1: 10, 1.0: 10, float("inf"): 10}
    after = {0.05: 10, 0.1: 60, 1.0: 110, float("inf"): 110}       # 100 new: 50 in (0.05,0.1], 50 in (0.1,1]
    v, n = slo.histogram_quantile(0.99, before, after)
    assert n == 100 and v == pytest.approx(0.1 + 0.9 * (49 / 50))
    v, _ = slo.histogram_quantile(0.5, before, after)
    assert v == pytest.approx(0.1)
    assert slo.histogram_quantile(0.99, after, after) == (None, 0)  # nothing happened in between
    over = {0.05: 0, 1.0: 0, float("inf"): 5}                       # everything above the last bound
    assert slo.histogram_quantile(0.99, {}, over)[0] == 1.0


def test_sli_buckets_from_an_aggregated_deployment_text():
    text = "\n".join([
        '# TYPE apiserver_request_sli_duration_seconds histogram',
        'apiserver_request_sli_duration_seconds_bucket{process="front-0",resource="pods",verb="GET",scope="resource",le="0.05"} 3',
        'apiserver_request_sli_duration_seconds_bucket{process="front-0",resource="pods",verb="GET",scope="resource",le="+Inf"} 4',
        '# TYPE apiserver_request_sli_duration_seconds histogram',
        'apiserver_request_sli_duration_seconds_bucket{process="shard-0",resource="pods",verb="GET",scope="resource",le="0.05"} 9',
        'apiserver_request_sli_duration_seconds_bucket{process="front-1",resource="pods",verb="GET",scope="resource",le="0.05"} 1',
        'apiserver_request_sli_duration_seconds_bucket{process="front-1",resource="pods",verb="GET",scope="resource",le="+Inf"} 1', ""])
    b = slo.sli_buckets(text, process_prefix="front")
    assert b == {("pods", "GET", "resource"): {0.05: 4.0, float("inf"): 5.0}}   # the shard's proxied call is not counted


def test_evaluate_fails_an_slo_in_its_worst_window_only():
    samples = [Sample(t, "pods", "POST", "resource", 0.01, 201) for t in range(0, 600)]
    samples += [Sample(100.0 + i * 0.01, "pods", "POST", "resource", 1.5, 201) for i in range(10)]  # window 1
    samples += [Sample(400.0, "nodes", "GET", "resource", 0.2, 200), Sample(401.0, "nodes", "GET", "resource", 9, 404)]
    res = slo.evaluate(samples, [], 0.0, 600.0, {"watch-latency": [(1.0, 0.3)]},
                       wanted={"mutating", "read-resource", "watch-latency"})
    assert res["mutating"]["verdict"] == "fail" and res["mutating"]["windows"] == 2
    assert res["mutating"]["client"]["pods POST"]["p99_s"] == 1.5
    assert res["read-resource"]["verdict"] == "pass"      # the 404 is not a latency sample
    assert res["watch-latency"]["verdict"] == "measured" and res["watch-latency"]["bound_s"] is None
    assert set(res) == {"mutating", "read-resource", "watch-latency"}


def test_index_answers_from_measured_capacities_and_says_when_beyond(tmp_path):
    step = {"size": 400, "pass": True, "resources": {"cores": 1.2, "pss_mib": 900.0},
            "doc": {"load": {"nodes": {"offered": 40, "achieved": 40}}, "resources": {"processes": {
                "apiserver-0": {"kind": "apiserver", "cores": 0.4, "pss_mib": 100.0},
                "apiserver-1": {"kind": "apiserver", "cores": 0.5, "pss_mib": 110.0},
                "etcd-main": {"kind": "etcd", "cores": 0.3, "pss_mib": 60.0}}}}}
    (tmp_path / "capacity-node-plane-ours.json").write_text(json.dumps({
        "recipe": "node-plane", "implementation": "ours", "size_name": "nodes", "capacity": 400,
        "first_failure": 800, "limited_by": "process apiserver-0 (busy 97%)", "steps": [step]}))
    a = index.answer(nodes=300, directory=str(tmp_path))
    assert a["picks"]["nodes"]["recipe"] == "node-plane" and a["picks"]["nodes"]["cores"] == 1.2
    b = index.answer(nodes=5000, directory=str(tmp_path))
    assert b["picks"]["nodes"]["recipe"] is None and b["picks"]["nodes"]["beyond_measured"]
    assert "beyond what was measured" in b["text"]
    c = index.answer(writes_per_second=50, directory=str(tmp_path))
    assert c["picks"]["writes"] == {"recipe": None, "measured": False}
    table = index.ladder(str(tmp_path))
    assert "| node-plane | rung 3 | ours | 400 nodes | 800 | process apiserver-0 (busy 97%) |" in table
    assert "| node-plane | ours | apiserver | 2 | 0.90 | 210 | 2.250 | 525 |" in table


def test_cli_list_and_errors():
    p = subprocess.run([sys.executable, "-m", "recipes", "list"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0
    for r in spec.names():
        assert r in p.stdout
    p = subprocess.run([sys.executable, "-m", "recipes", "run", "no-such-recipe"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1 and "no recipe 'no-such-recipe'" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run([sys.executable, "-m", "recipes", "run", "node-plane", "--implementation", "kube"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "does not run on 'kube'" in p.stderr and "Traceback" not in p.stderr


def test_index_converts_state_gb_at_the_measured_object_size(tmp_path):
    step = {"size": 40000, "pass": True, "resources": {"cores": 0.8, "pss_mib": 700.0},
            "doc": {"load": {"state": {"objects": 40000, "bytes_per_object": 1500}}, "resources": {"processes": {}}}}
    (tmp_path / "capacity-state-bound-ours.json").write_text(json.dumps({
        "recipe": "state-bound", "implementation": "ours", "size_name": "objects", "capacity": 40000,
        "first_failure": 80000, "limited_by": "the machine", "steps": [step]}))
    assert index.answer(state_gb=0.05, directory=str(tmp_path))["picks"]["state"]["recipe"] == "state-bound"
    far = index.answer(state_gb=0.1, directory=str(tmp_path))["picks"]["state"]
    assert far["recipe"] is None and far["largest_measured"] == pytest.approx(0.06)


def test_a_failed_run_prints_the_tail_of_every_process_log(tmp_path):
    """A run that fails keeps its directory, which in CI goes with the machine: the runner prints the last lines
    of every log under it (a deployment's children's included), so the failure says which process stopped."""
    from recipes.runner import say_log_tails
    (tmp_path / "etcd-main.log").write_text("".join(f"etcd line {i}\n" for i in range(30)))
    (tmp_path / "deployment" / "logs").mkdir(parents=True)
    (tmp_path / "deployment" / "logs" / "front-0.log").write_text("serving\nerror: cannot listen on 13705\n")
    (tmp_path / "data.db").write_text("not a log")
    said: list[str] = []
    say_log_tails(str(tmp_path), said.append, lines=5)
    text = "\n".join(said)
    assert "--- etcd-main.log (last 5 lines)" in text and "| etcd line 29" in text and "etcd line 24" not in text
    assert "--- deployment/logs/front-0.log (last 2 lines)" in text and "| error: cannot listen on 13705" in text
    assert "not a log" not in text


def test_up_customizes_a_recipe_and_refuses_what_does_not_apply():
    """`recipes up`'s --shards / --fronts / --without / --apiserver-flag (what `shardslice up` translates its
    options to): K shards and one controller per shard; anything that does not apply is refused, not ignored."""
    r = spec.customized(spec.load("slice"), shards=3, fronts=2, apiserver_flags=("--embedded-lease-etcd",))
    dep, ctl = r.process("deployment"), r.process("slice-controllers")
    assert (dep.options["shards"], dep.options["fronts"], ctl.count) == (3, 2, 3)
    assert dep.flags[-1] == "--embedded-lease-etcd"
    assert spec.load("slice").process("deployment").options["shards"] == 2   # the catalog's recipe is untouched
    assert spec.customized(spec.load("slice"), without=("slice-controllers",)).process("slice-controllers") is None
    for kw, message in (({"shards": 2}, "runs no deployment"), ({"without": ("deployment",)}, "may be left out"),
                        ({"without": ("kwok",)}, "may be left out")):
        with pytest.raises(spec.RecipeError, match=message):
            spec.customized(spec.load("classic-ha" if "shards" in kw else "slice"), **kw)
    with pytest.raises(spec.RecipeError, match="at least 1"):
        spec.customized(spec.load("slice"), shards=0)
