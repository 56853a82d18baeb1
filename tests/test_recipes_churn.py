"""The churn axis's recipe at small scale: Widgets on their own store through a deployment of two resident
shards and two fronts, reconciled by two sharded controllers, every event checked on a watch."""
from __future__ import annotations

import asyncio

from recipes import runner, spec
from tests.recipe_checks import assert_small_run


def test_churn_bound_recipe_runs_small(tmp_path):
    doc = asyncio.run(runner.run(spec.load("churn-bound"), scale="small", out=str(tmp_path / "churn.json")))
    print(runner.report(doc))
    assert_small_run(doc, {"deployment/supervisor", "deployment/front-0", "deployment/front-1", "deployment/shard-0",
                           "deployment/shard-1", "controller-0", "controller-1", "etcd-main", "etcd-widgets"},
                     {"mutating", "read-namespace", "watch-latency"})
    assert "sharded controllers stayed in their ranges" in doc["checks"]["churn"]
    assert (tmp_path / "churn.json").exists()
