"""What a small-scale recipe run must show, whatever its timing (issue 24's CI line): every process healthy
through the run (the runner raises otherwise), the workload's correctness checks passing, every SLI the
workload exercises measured, resources reported for every process, and every process stopped afterwards.
SLO verdicts are printed and recorded in the JSON, not asserted: timing is judged by the full runs."""
from __future__ import annotations

import os


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def assert_small_run(doc: dict, processes: set[str], slis: set[str]) -> None:
    failed = [f"{k}: {n} ({c['detail']})" for k, cs in doc["checks"].items() for n, c in cs.items() if not c["ok"]]
    assert not failed, failed
    assert doc["checks"], "no correctness check ran"
    assert set(doc["slis"]) == slis, sorted(doc["slis"])
    for name, s in doc["slis"].items():
        assert s["verdict"] in ("pass", "fail", "measured"), (name, s)
        assert any(g.get("p99_s") is not None for g in s["client"].values()), (name, "no client-side figure")
        if "server" in s:   # the servers' apiserver_request_sli_duration_seconds saw the same kind of call
            assert any(g.get("observations", 0) > 0 for g in s["server"].values()), (name, "no server-side figure")
    procs = doc["resources"]["processes"]
    assert processes <= set(procs), sorted(procs)
    for name, p in procs.items():
        assert p["cores"] is not None and p["cores"] >= 0 and p["pss_mib"] > 0, (name, p)
    for name, ld in doc["load"].items():
        assert ld["offered"] > 0 and ld["achieved"] > 0, (name, ld)
    left = [n for n, p in procs.items() if alive(p["pid"])]
    assert not left, f"still running after the run: {left}"
    assert doc["verdict"]["pass"] in (True, False)
    print(f"SLO verdicts of {doc['recipe']} (recorded, not asserted): "
          + ", ".join(f"{n} {s['verdict']}" for n, s in doc["slis"].items())
          + f"; overall {'PASS' if doc['verdict']['pass'] else 'FAIL'} {doc['verdict']}")
    assert os.path.isdir("/proc")
