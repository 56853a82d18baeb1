"""The sharded slice (issue 11 §2-3): K = 2 resident shards over a real etcd, one controller replica per
shard pinned to its range (shardslice/controller.py), the launcher (`python -m shardslice up`, a name for
`python -m recipes up slice`), and the benchmark's smoke form (bench/slice.py --quick)."""
from __future__ import annotations

import asyncio
import base64
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from machinery.shard_selector import complementary
from shardslice import widgets
from shardslice.controller import Controller
from shardslice.launcher import Proc, Slice
from storage.embedded import distro_etcd_binary, free_port
from tests.helpers import ROOT, Api, start_apiserver
from tests.helpers.deployment import gone, parent
from tests.helpers.gobin import ready_binaries

NS = "slice-test"


def wait_for(cond, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def all_widgets(api: Api) -> list[dict]:
    r = api.get(widgets.collection())
    assert r.status_code == 200, r.text
    return r.json()["items"]


def all_reconciled(api: Api, n: int) -> list[dict] | None:
    items = all_widgets(api)
    return items if len(items) == n and all(widgets.reconciled(o) for o in items) else None


def reconciles(c: Proc) -> dict:
    """The controller's records once it has nothing queued or in flight (a status write is in etcd before
    its answer reaches the controller)."""
    def idle():
        r = Api(c.base).get("/debug/controller")
        assert r.status_code == 200
        d = r.json()
        return d if d["queue"] == 0 and d["in_flight"] == 0 else None
    return wait_for(idle, 20, f"{c.name} idle")


@pytest.fixture(scope="module")
def slice2(current_etcd):
    """Two shards, the front, two controllers; clients write through the front (`sl.server`)."""
    with Slice(2, etcd_servers=current_etcd.endpoint, etcd_prefix=f"/registry-slice{os.getpid()}") as sl:
        assert sl.front is not None, "the front (python -m apiserver --front) did not start"
        yield sl


def owner(sl: Slice, uid: str) -> int:
    """Which controller's range holds `uid`, computed here from the selectors (not asked of anyone)."""
    hits = [i for i, c in enumerate(sl.controllers) if c.selector.matches(uid, "")]
    assert len(hits) == 1, (uid, hits)
    return hits[0]


def test_each_generation_reconciled_exactly_once_in_range(slice2):
    """40 Widgets created, then two rounds of spec updates (each round waited out), then a burst of
    updates and deletes not waited for: every generation the controllers saw settled is reconciled exactly
    once, by the controller whose range holds the UID, with the right status; no replica read or wrote
    outside its range; a restarted replica writes nothing (every generation is already done)."""
    sl = slice2
    api = Api(sl.server)
    # every apiserver of the slice keeps its warm-restart snapshot in a state directory of its own
    dirs = [p.argv[p.argv.index("--state-dir") + 1] for p in [sl.front, *sl.shards]]
    assert len(set(dirs)) == len(dirs) and not any(d.startswith(ROOT) for d in dirs), dirs
    assert api.post("/api/v1/namespaces", {"metadata": {"name": NS}}).status_code in (201, 409)
    coll = widgets.collection(NS)
    expected: set[tuple[str, int]] = set()
    uids = {}
    for i in range(40):
        r = api.post(coll, widgets.widget(f"w{i:02d}", NS, i))
        assert r.status_code == 201, r.text
        o = r.json()
        uids[o["metadata"]["name"]] = o["metadata"]["uid"]
        expected.add((o["metadata"]["uid"], 1))
    wait_for(lambda: all_reconciled(api, 40), 30, "40 widgets reconciled")
    for rnd in (1, 2):
        for i in range(0, 40, 2):
            name = f"w{i:02d}"
            cur = api.get(f"{coll}/{name}").json()
            cur["spec"]["size"] = i + 100 * rnd
            r = api.put(f"{coll}/{name}", cur)
            assert r.status_code == 200, r.text
            assert r.json()["metadata"]["generation"] == rnd + 1
            expected.add((uids[name], rnd + 1))
        wait_for(lambda: all_reconciled(api, 40), 30, f"round {rnd} reconciled")
    # a burst: several generations in a row, and deletes, without waiting
    for j in range(3):
        for i in range(1, 40, 4):
            name = f"w{i:02d}"
            cur = api.get(f"{coll}/{name}").json()
            cur["spec"]["size"] = 1000 + j
            assert api.put(f"{coll}/{name}", cur).status_code == 200
    for i in range(3, 40, 8):
        assert api.delete(f"{coll}/w{i:02d}").status_code == 200
    live = 40 - len(range(3, 40, 8))
    final = wait_for(lambda: all_reconciled(api, live), 30, "the burst reconciled")

    for o in final:   # status values right, written by the owner of the UID's range
        md, st = o["metadata"], o["status"]
        assert st == {"observedGeneration": md["generation"], "square": o["spec"]["size"] ** 2,
                      "shard": f"controller-{owner(sl, md['uid'])}"}, o
    docs = [reconciles(c) for c in sl.controllers]
    seen: dict[tuple[str, int], str] = {}
    for i, d in enumerate(docs):
        assert d["synced"] and d["watch_list"]
        assert d["counts"]["out_of_range_reads"] == 0 and d["counts"]["out_of_range_writes"] == 0, d["counts"]
        assert d["reconciles_total"] == d["counts"]["reconciles"] == len(d["reconciles"])
        for rec in d["reconciles"]:
            key = (rec["uid"], rec["generation"])
            assert key not in seen, f"{key} reconciled by {seen[key]} and {d['name']}"
            seen[key] = d["name"]
            assert owner(sl, rec["uid"]) == i, f"{d['name']} wrote {rec} outside its range"
            assert sl.controllers[i].selector.matches(rec["uid"], rec["namespace"])
    assert all(d["reconciles_total"] > 0 for d in docs), "one replica reconciled nothing: ranges not split?"
    # every generation that was waited out is there exactly once; the final generation of every live object too
    assert expected <= set(seen), sorted(expected - set(seen))[:5]
    assert {(o["metadata"]["uid"], o["metadata"]["generation"]) for o in final} <= set(seen)
    # the replicas' stores partition the live objects
    assert sum(d["objects"] for d in docs) == live

    # restart replica 0: its watch-list brings the whole range back, nothing is written again
    c0 = sl.controllers[0]
    c0.terminate()
    c0.stop()
    c0.start().wait_ready(time.monotonic() + 30)
    time.sleep(1.0)
    d0 = reconciles(c0)
    assert d0["objects"] == docs[0]["objects"] and d0["reconciles_total"] == 0, d0["counts"]
    assert d0["counts"]["out_of_range_reads"] == 0 and d0["counts"]["events"] == d0["objects"]


def test_out_of_range_objects_are_counted_and_never_written():
    """The replica's own check: an object outside its range that a server sent anyway is counted, not
    stored, never reconciled (no network: the informer's ingest and the reconcile on a bare Controller)."""
    low, high = complementary(2)
    c = Controller("http://127.0.0.1:1", low, "c-low")
    objs = [widgets.widget(f"x{i}", NS, i) for i in range(64)]
    for i, o in enumerate(objs):
        o["metadata"].update(uid=str(uuid.UUID(int=random.Random(i).getrandbits(128))), generation=1, resourceVersion=str(i + 1))
    mine = [o for o in objs if low.matches(o["metadata"]["uid"], NS)]
    assert 0 < len(mine) < len(objs)
    for o in objs:
        c._ingest("ADDED", o)
    assert c.counts["out_of_range_reads"] == len(objs) - len(mine)
    assert set(c.store) == {o["metadata"]["uid"] for o in mine}
    assert c._queue.qsize() == len(mine)
    # a stray out-of-range object put in the store by hand is refused at the write
    stray = next(o for o in objs if high.matches(o["metadata"]["uid"], NS))
    c.store[stray["metadata"]["uid"]] = stray
    assert asyncio.run(c.reconcile(stray["metadata"]["uid"])) is False
    assert c.counts["out_of_range_writes"] == 1 and c.counts["reconciles"] == 0


def test_list_and_watch_fallback_without_watch_list(current_etcd):
    """Against a server that refuses watch-list (--watch-cache=false: 422, S5.3), the informer lists its
    range (paged, with the selector) and watches from the list's RV; it still reconciles only its range."""
    prefix = f"/registry-slice-nocache{os.getpid()}"
    srv = start_apiserver(current_etcd.endpoint, prefix, "--watch-cache=false")
    try:
        api = Api(srv.base)
        assert api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", widgets.crd()).status_code == 201
        wait_for(lambda: api.get(widgets.collection()).status_code == 200, 20, "the CRD served")
        api.post("/api/v1/namespaces", {"metadata": {"name": NS}})
        before = [api.post(widgets.collection(NS), widgets.widget(f"b{i}", NS, i)).json() for i in range(12)]
        low = complementary(2)[0]

        async def run():
            c = Controller(srv.base, low, "c-low", workers=2)
            await c.start()
            try:
                await asyncio.wait_for(c.synced.wait(), 20)
                after = [api.post(widgets.collection(NS), widgets.widget(f"a{i}", NS, i)).json() for i in range(12)]
                objs = before + after
                mine = {o["metadata"]["uid"] for o in objs if low.matches(o["metadata"]["uid"], NS)}
                deadline = time.monotonic() + 20
                while {r[0] for r in c.records} != mine and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                return c, mine
            finally:
                await c.stop()
        c, mine = asyncio.run(run())
        assert not c.watch_list_supported and c.counts["lists"] == 1 and c.counts["watches"] >= 1
        assert {r[0] for r in c.records} == mine and len(c.records) == len(mine)
        assert c.counts["out_of_range_reads"] == 0
    finally:
        srv.stop()


def test_launcher_up_starts_and_stops(tmp_path):
    """`python -m shardslice up --shards 2`, a name for `python -m recipes up slice` (issue 24's one launcher):
    prints what it starts with each log, the address and a kubeconfig; the slice answers and reconciles; SIGINT
    (Ctrl-C) stops every process it started and exits 0; started again on the same state directory it serves
    what it held. On the newest etcd found (the suite's current build), with `--embedded-lease-etcd`: a Lease
    written through the front is on the Lease etcd, not the main one (issue 22 §3)."""
    _launcher_up(tmp_path, "newest", lease_etcd=True)


def test_a_killed_launcher_leaves_no_process_behind(tmp_path, current_etcd):
    """SIGKILL to `shardslice up` (as a failing test's cleanup does): every process it started dies with it
    (PR_SET_PDEATHSIG: the deployment, whose shards and front die with it in turn, and the controllers), instead
    of running on as orphans."""
    p = subprocess.Popen([sys.executable, "-m", "shardslice", "up", "--shards", "2", "--port", str(free_port()),
                          "--state-dir", str(tmp_path / "state"), "--etcd-servers", current_etcd.endpoint],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        text = _until_ready(p)
        pids = _pids(text)
        assert len(pids) == 6, text        # the deployment, its 2 shards and front, 2 controllers
        assert "using etcd-main" in text and current_etcd.endpoint in text, text
        p.kill()
        p.wait()
        wait_for(lambda: all(gone(pid) for pid in pids), 30, "processes left running after the launcher's death")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()


def test_launcher_up_on_the_wheels_etcd(tmp_path):
    """The same on the wheel's etcd 3.5.1, a new user's embedded etcd: there the shards refuse a watch-list
    with an ERROR event after the 200 (S3.6), and the controllers fall back to a list and a watch as
    client-go does (they retried the watch-list forever, and the slice never became ready)."""
    _launcher_up(tmp_path, "distro")


def test_launcher_options_that_are_gone_are_refused():
    """`--no-front`: the slice is a deployment, whose front is its address; refused with a message, not ignored."""
    r = subprocess.run([sys.executable, "-m", "shardslice", "up", "--no-front"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--no-front is gone" in r.stderr and "Traceback" not in r.stderr


def _until_ready(p: subprocess.Popen, timeout: float = 120) -> str:
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        out.append(line)
        if line.startswith("ready: "):
            break
    text = "".join(out)
    assert "\nready: " in text, text
    return text


def _pids(text: str) -> list[int]:
    return [int(x) for x in re.findall(r" pid (\d+) ", text)]


def _launcher_up(tmp_path, etcd: str, lease_etcd: bool = False) -> None:
    ready_binaries("etcd")   # "newest" is the current build: built (or waited for) before the time limit
    state = tmp_path / "state"
    env = dict(os.environ)
    if etcd == "distro":
        env["ETCD_BIN"] = distro_etcd_binary()
    argv = [sys.executable, "-m", "shardslice", "up", "--shards", "2", "--port", str(free_port()),
            "--state-dir", str(state), *(["--embedded-lease-etcd"] if lease_etcd else [])]
    p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        text = _until_ready(p)
        assert text.startswith("python -m shardslice up is a name for: -m recipes up slice --shards 2"), text
        pids = _pids(text)
        assert len(pids) == 6, text        # the deployment, its 2 shards and front, 2 controllers
        deployment = int(re.search(r"started deployment +pid (\d+)", text).group(1))
        apiservers = [int(x) for x in re.findall(r"deployment's (?:shard|front)-\d +pid (\d+)", text)]
        assert len(apiservers) == 3 and all(parent(parent(pid)) == deployment for pid in apiservers), text
        for log in re.findall(r" log (\S+)", text):     # every process printed with its log, as it starts
            assert os.path.exists(log), log
        server = re.search(r"^ready: (\S+) \(kubeconfig (\S+)\)$", text, re.M)
        assert re.search(r"server: (\S+)", (state / "kubeconfig").read_text()).group(1) == server.group(1)
        assert server.group(2) == str(state / "kubeconfig")
        api = Api(server.group(1))
        assert api.get("/readyz").status_code == 200
        etcd_url = re.search(r"starting etcd-main +(\S+)", text).group(1)
        version = Api(etcd_url).get("/version").json()["etcdserver"]
        assert (version == "3.5.1") == (etcd == "distro"), version
        api.post("/api/v1/namespaces", {"metadata": {"name": NS}})
        r = api.post(widgets.collection(NS), widgets.widget("up", NS, 7))
        assert r.status_code == 201, r.text
        got = wait_for(lambda: widgets.reconciled(o := api.get(f"{widgets.collection(NS)}/up").json()) and o,
                       20, "the widget reconciled")
        assert got["status"]["square"] == 49
        if lease_etcd:
            lease_url = re.search(r"embedded lease etcd: (\S+)", (state / "deployment.log").read_text()).group(1)
            r = api.post("/apis/coordination.k8s.io/v1/namespaces/default/leases", {"metadata": {"name": "up"}})
            assert r.status_code == 201, r.text

            def keys(url: str) -> list[str]:
                r = Api(url).req("POST", "/v3/kv/range", json={"key": "Lw==", "range_end": "MA==", "keys_only": True})
                return [base64.b64decode(kv["key"]).decode() for kv in r.json().get("kvs", [])]
            assert any(k.endswith("/leases/default/up") for k in keys(lease_url))
            assert not any(k.endswith("/leases/default/up") for k in keys(etcd_url))
        p.send_signal(signal.SIGINT)
        rest, _ = p.communicate(timeout=60)
        assert p.returncode == 0, text + rest
        assert "stopped every process" in rest
        for pid in pids:
            assert gone(pid), pid
        if etcd == "distro":   # started again on the same state directory: what it held is there
            p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            text = _until_ready(p)
            again = Api(re.search(r"^ready: (\S+)", text, re.M).group(1))
            assert again.get(f"{widgets.collection(NS)}/up").json()["status"]["square"] == 49
            p.send_signal(signal.SIGTERM)
            rest, _ = p.communicate(timeout=60)
            assert p.returncode == 0 and "stopped every process" in rest, rest
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()   # on a failure too: else the next test fails on the unclosed pipe's ResourceWarning
        # the deployment's Lease etcd keeps its data on tmpfs for its state directory (a later `up` on it would
        # find its Leases): removed with the test's
        for ident in state.rglob("lease-etcd.id"):
            shutil.rmtree(os.path.join("/dev/shm", "residency-lease-etcd-" + ident.read_text().strip()),
                          ignore_errors=True)


def test_bench_slice_quick(tmp_path):
    """bench/slice.py --quick (churn-bound, K = 2, a few hundred Widgets): every figure is there, the
    slice's correctness targets hold (no etcd full-range read after start-up, every generation reconciled
    once and in range), lists and watches went through the front."""
    ready_binaries("etcd")
    from bench import slice as bench_slice
    out = tmp_path / "slice.json"
    doc = bench_slice.main(["--quick", "--ks", "2", "--profiles", "churn", "--objects", "200", "--churn-seconds", "3",
                            "--lists", "3", "--burst", "50",
                            "--out", str(out), "--png", str(tmp_path / "slice.png")])
    assert out.exists() and (tmp_path / "slice.png").stat().st_size > 10_000
    runs = doc["profiles"]["churn"]["runs"]
    assert [r["k"] for r in runs] == [2]
    for r in runs:
        assert r["front"] and r["rss_slice_bytes"] > 0 and r["rss"]["full"] > 0
        assert r["etcd_full_range_reads_after_startup"] == 0, r["etcd_after_startup"]
        rec = r["reconcile"]
        assert rec["duplicates"] == rec["out_of_range_reads"] == rec["out_of_range_writes"] == 0
        assert rec["outside_range_by_uid"] == rec["final_generation_unreconciled"] == 0, rec
        assert rec["acked_generations"] > 10 and rec["latency_ms"]["p99"] > 0 and rec["throughput_per_s"] > 0
        assert r["lists"]["front"]["items"] == r["lists"]["full"]["items"] > 150   # 200 loaded, churn 1:1:1
        assert r["backlog"]["reconciled"] == r["backlog"]["objects"] == 50 and r["backlog"]["duplicates_all_records"] == 0
        assert r["lists"]["front"]["etcd_ops"].get("list", 0) == 0
        assert r["watch"]["front"]["n"] > 10 and r["watch"]["direct"]["n"] > 10, r["watch"]
    met = {t["target"]: t["met"] for t in doc["targets"]}
    assert met["zero etcd full-range reads after start-up (all K)"] is True
    assert all(v is True for k, v in met.items() if k.startswith("every generation")), doc["targets"]
    assert "reconcile p50 / p99" in bench_slice.table(doc)
    assert doc["command"].startswith("python -m bench.slice --quick --ks 2")
