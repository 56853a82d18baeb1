"""The state axis's recipe at small scale: realistic ConfigMaps in two resident shards with compression, read
through two fronts (GETs, namespace and cluster lists) while a few are updated."""
from __future__ import annotations

import asyncio

from recipes import runner, spec
from tests.recipe_checks import assert_small_run


def test_state_bound_recipe_runs_small():
    doc = asyncio.run(runner.run(spec.load("state-bound"), scale="small"))
    print(runner.report(doc))
    assert_small_run(doc, {"deployment/supervisor", "deployment/front-0", "deployment/front-1", "deployment/shard-0",
                           "deployment/shard-1", "etcd-main"},
                     {"mutating", "read-resource", "read-namespace", "read-cluster"})
    assert doc["load"]["state"]["objects"] == 1500
