"""The node plane under faults (issue 22 §6): kubelets renewing their Leases through the node tier
(`python -m nodetier`) in front of this apiserver, Leases on an etcd of their own (no fsync, tmpfs, as
`--embedded-lease-etcd`), and a real kube-controller-manager's node lifecycle controller judging the nodes;
one fault per scenario, every answer recorded, and checkers over the whole history.

Scenarios (`NODE_SCENARIOS`):

* `node-none`: no fault (the baseline: every checker must pass without one);
* `tier-kill`: the tier SIGKILLed under traffic and started again on its port at once (what a supervisor does);
* `tier-restart`: the tier stopped with SIGTERM (it forwards every pending renewal before it exits) and
  started again TIER_DOWN seconds later (20 s at upstream's scale);
* `control-plane-kill`: the apiserver behind a live tier SIGKILLed, started again OUTAGE seconds later;
* `lease-etcd-kill`: the Lease etcd SIGKILLed, started again OUTAGE seconds later on its data directory.

Traffic, per node: a kubelet (`Kubelet`: a PUT of its last answer with a new renewTime every period + up to
4 %, a GET and a retry on 409, a retry after an error, as the kubelet's lease controller), a reader GETting
the Lease at the tier, and an editor changing a label at the tier (a change the tier hands on to the control
plane at once). One more node's kubelet stops at the start: the controller must find it.

Checkers (`check`):

* per Lease, the tier's answers are linearizable: one value per resourceVersion; a conditional write that
  succeeded follows the version it was conditioned on with nothing in between (no lost update); writes and
  reads are ordered by resourceVersion as they are in real time (no stale read); renewTime never goes back
  along the versions, except once after a SIGKILL of the tier, by at most what the README documents (the
  renewals not yet forwarded: less than one forward interval);
* no acknowledged write lost: at the kill, the control plane's copy trails the last acknowledged renewal by
  less than the forward interval (`tier-kill`) or not at all (`tier-restart`, which forwards before exiting);
  at the end (the tier stopped with SIGTERM), the control plane holds every Lease's last acknowledged renewal
  and label;
* while the control plane or the Lease etcd is down, the tier goes on answering every live kubelet's renewals;
* the controller manager's verdicts: no live node ever leaves Ready=True; the stopped node goes Ready=Unknown
  no earlier than the grace period after its last acknowledged renewal and no later than grace + 10 s, with the
  `node.kubernetes.io/unreachable` taints NoSchedule and NoExecute and the controller's `NodeNotReady` event in
  the core events (what `kubectl describe node` shows); every process we did not kill is alive.

Times are scaled from upstream's 40 s Lease / 50 s grace / 30 s forward interval to 20 / 25 / 10 s (the
forward interval two renewal periods rather than three, so that a tier restarted at once is back within the
margin its interval leaves: grace - (interval + a period) - the controller's poll, about 8 s; the README's
margin at the defaults is 10 s).

`python -m tests.robustness --scenario tier-kill` runs one; tests/test_robustness.py runs each in short form.
"""
from __future__ import annotations

import asyncio
import datetime
import json
import os
import random
import signal
import time
from dataclasses import dataclass, field

import aiohttp

from nodetier.leases import micro_time as _micro_time
from tests.helpers.kwok import KubeControllerManagerProcess, kube_controller_manager_binary, ready_node
from tests.helpers.nodetier import NodeTierProcess
from tests.robustness.cluster import Apiserver, Etcd

LEASE_SECONDS = 20
PERIOD = LEASE_SECONDS / 4          # the kubelet renews every quarter of its Lease
GRACE = 25                          # --node-monitor-grace-period (upstream 50)
MONITOR = 2                         # --node-monitor-period (upstream 5)
FORWARD = 10.0                      # the tier's --forward-interval (upstream-scaled 30 s would be 15)
OUTAGE = 4.0                        # seconds the control plane or the Lease etcd stays down
# seconds a tier stopped with SIGTERM stays down (20 s at upstream's scale). The margin: the control plane's
# copy is the newest renewal at the stop (up to a period old), then nothing until a kubelet's retry after the
# restart (up to a period here; the kubelet's backoff reaches 7 s) is forwarded at once, then the controller's
# poll: 5 + 10 + 5 + 2 = 22 s of the 25 s grace (upstream: 10.4 + 20 + 7 + 5 = 42 s of 50).
TIER_DOWN = 10.0
LIVE = ["robust-node-0", "robust-node-1", "robust-node-2"]
DEAD = "robust-node-dead"
NS = "kube-node-lease"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
EDIT_LABEL = "robustness.example/edit"
TAINT = "node.kubernetes.io/unreachable"
NODE_SCENARIOS = ["node-none", "tier-kill", "tier-restart", "control-plane-kill", "lease-etcd-kill"]


def micro_time(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(s: str | None) -> float:
    return _micro_time(s) or 0.0


@dataclass
class LOp:
    """One call at the tier: renew (PUT), edit (merge PATCH of a label), read (GET), get (the kubelet's GET
    after a 409). status None: no answer (refused, reset, timed out). For an answer 200: the version's
    resourceVersion, renewTime and label."""
    kind: str
    lease: str
    start: float
    end: float
    status: int | None
    pre_rv: int | None = None       # a renewal's precondition
    rv: int | None = None
    renew: float | None = None      # renewTime answered (200)
    label: str | None = None        # label answered (200)
    sent: float | str | None = None  # what a renewal (renewTime) or an edit (label) sent


@dataclass
class Run:
    name: str
    seed: int
    t0: float = field(default_factory=time.time)
    ops: list[LOp] = field(default_factory=list)
    ready_seen: dict[str, list[str]] = field(default_factory=dict)   # node -> Ready statuses in order
    poll_errors: int = 0
    fault_at: float | None = None
    fault_end: float | None = None
    cp_at_fault: dict[str, float] = field(default_factory=dict)       # the control plane's renewTime at the kill
    pending_at_fault: int | None = None                               # renewals the tier held unforwarded then
    notes: list[str] = field(default_factory=list)

    def now(self) -> float:
        return time.time()


def _lease_obj(op_answer: dict) -> tuple[int, float, str | None]:
    md = op_answer.get("metadata") or {}
    return (int(md.get("resourceVersion") or 0), parse_time((op_answer.get("spec") or {}).get("renewTime")),
            (md.get("labels") or {}).get(EDIT_LABEL))


class Kubelet:
    """Renews one Lease at the tier as the kubelet's lease controller does."""

    def __init__(self, run: Run, s: aiohttp.ClientSession, base: str, name: str, rng: random.Random):
        self.run, self.s, self.base, self.name, self.rng = run, s, base, name, rng
        self.cur: dict | None = None
        self.stop = asyncio.Event()

    async def _get(self) -> bool:
        t = self.run.now()
        try:
            async with self.s.get(f"{self.base}{LEASES}/{self.name}") as r:
                body = await r.json(content_type=None)
                op = LOp("get", self.name, t, self.run.now(), r.status)
                if r.status == 200:
                    op.rv, op.renew, op.label = _lease_obj(body)
                    self.cur = body
                self.run.ops.append(op)
                return r.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            self.run.ops.append(LOp("get", self.name, t, self.run.now(), None))
            return False

    async def renew_once(self) -> None:
        for _attempt in range(5):
            if self.cur is None and not await self._get():
                await asyncio.sleep(0.2)
                continue
            body = dict(self.cur)
            body["spec"] = {**body["spec"], "renewTime": micro_time(time.time())}
            op = LOp("renew", self.name, self.run.now(), 0.0, None, pre_rv=int(body["metadata"]["resourceVersion"]),
                     sent=parse_time(body["spec"]["renewTime"]))
            try:
                async with self.s.put(f"{self.base}{LEASES}/{self.name}", json=body) as r:
                    answer = await r.json(content_type=None)
                    op.status, op.end = r.status, self.run.now()
                    if r.status == 200:
                        op.rv, op.renew, op.label = _lease_obj(answer)
                        self.cur = answer
                        return
                    if r.status == 429:
                        await asyncio.sleep(float(r.headers.get("Retry-After") or 1))
                    self.cur = None           # 409 or any error: GET the Lease, then try again
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
                op.end = self.run.now()
                self.cur = None
                await asyncio.sleep(0.2)
            finally:
                self.run.ops.append(op)

    async def loop(self) -> None:
        while not self.stop.is_set():
            await self.renew_once()
            try:
                await asyncio.wait_for(self.stop.wait(), PERIOD * (1 + 0.04 * self.rng.random()))
            except asyncio.TimeoutError:
                pass


async def reader(run: Run, s: aiohttp.ClientSession, base: str, name: str, stop: asyncio.Event,
                 rng: random.Random) -> None:
    while not stop.is_set():
        t = run.now()
        try:
            async with s.get(f"{base}{LEASES}/{name}") as r:
                body = await r.json(content_type=None)
                op = LOp("read", name, t, run.now(), r.status)
                if r.status == 200:
                    op.rv, op.renew, op.label = _lease_obj(body)
                run.ops.append(op)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            run.ops.append(LOp("read", name, t, run.now(), None))
        await asyncio.sleep(0.3 + 0.4 * rng.random())


async def editor(run: Run, s: aiohttp.ClientSession, base: str, name: str, stop: asyncio.Event,
                 rng: random.Random) -> None:
    """A label changed at the tier now and then (kubectl label through the node's kubeconfig): a change the
    tier hands on to the control plane before it answers."""
    i = 0
    while not stop.is_set():
        await asyncio.sleep(8.0 + 8.0 * rng.random())      # now and then: each edit costs the kubelet one 409
        i += 1
        value = f"v{i}"
        t = run.now()
        op = LOp("edit", name, t, 0.0, None, sent=value)
        try:
            patch = {"metadata": {"labels": {EDIT_LABEL: value}}}
            async with s.patch(f"{base}{LEASES}/{name}", data=json.dumps(patch),
                               headers={"Content-Type": "application/merge-patch+json"}) as r:
                body = await r.json(content_type=None)
                op.status, op.end = r.status, run.now()
                if r.status == 200:
                    op.rv, op.renew, op.label = _lease_obj(body)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            op.end = run.now()
        run.ops.append(op)


async def watch_nodes(run: Run, s: aiohttp.ClientSession, cp: str, stop: asyncio.Event) -> None:
    """The nodes' Ready statuses as the control plane shows them, every 0.5 s (errors while it is down)."""
    while not stop.is_set():
        try:
            async with s.get(f"{cp}/api/v1/nodes") as r:
                for n in (await r.json(content_type=None))["items"]:
                    name = n["metadata"]["name"]
                    c = next((c for c in (n.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), None)
                    seen = run.ready_seen.setdefault(name, [])
                    if c and (not seen or seen[-1] != c["status"]):
                        seen.append(c["status"])
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError, TypeError):
            run.poll_errors += 1
        await asyncio.sleep(0.5)


def lease_obj(name: str) -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS,
                     "renewTime": micro_time(time.time())}}


# --- the processes -----------------------------------------------------------------------------------------

class Plane:
    """The main etcd, the Lease etcd, the apiserver (Leases routed to the Lease etcd), the tier in front of
    it, and kube-controller-manager reading the apiserver: each on fixed ports, so a fault can kill and start
    one again where it was."""

    def __init__(self):
        self.etcd = Etcd().start()
        self.lease_etcd = Etcd(lease=True).start()
        self.api = Apiserver(self.etcd.endpoint, "--etcd-servers-overrides",
                             f"coordination.k8s.io/leases#{self.lease_etcd.endpoint}").start()
        self.tier = NodeTierProcess(self.api.base, "--forward-interval", str(FORWARD), name="robust-nodetier",
                                    ready_timeout=60.0)
        self.tier.start().wait_ready()
        self.tier_restarts = 0
        self.kcm = KubeControllerManagerProcess(self.api.base, grace=GRACE, monitor_period=MONITOR)

    def kill_tier(self) -> None:
        os.kill(self.tier.popen.pid, signal.SIGKILL)
        self.tier.popen.wait()

    def term_tier(self) -> None:
        self.tier.stop(timeout=15)

    def start_tier(self) -> None:
        if self.tier.log_path and os.path.exists(self.tier.log_path):
            os.replace(self.tier.log_path, f"{self.tier.log_path}.{self.tier_restarts}")
        self.tier_restarts += 1
        self.tier.start().wait_ready(60)

    def alive(self) -> dict[str, bool]:
        return {"etcd": self.etcd.alive(), "lease etcd": self.lease_etcd.alive(), "apiserver": self.api.alive(),
                "tier": self.tier.popen is not None and self.tier.popen.poll() is None,
                "kube-controller-manager": self.kcm.alive()}

    def stop(self) -> None:
        self.kcm.stop(keep_dir=False)
        self.tier.stop(timeout=15, strict=False)
        self.api.stop()
        self.lease_etcd.stop()
        self.etcd.stop()


def _kcm_healthy(kcm: KubeControllerManagerProcess, timeout: float) -> bool:
    """Its /healthz answers 200 within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and kcm.alive():
        if kcm.get("/healthz", timeout=2)[0] == 200:
            return True
        time.sleep(0.3)
    return False


async def _control_plane_renewals(s: aiohttp.ClientSession, cp: str) -> dict[str, tuple[float, str | None]]:
    async with s.get(f"{cp}{LEASES}") as r:
        items = (await r.json(content_type=None))["items"]
    return {it["metadata"]["name"]: (parse_time(it["spec"].get("renewTime")),
                                     (it["metadata"].get("labels") or {}).get(EDIT_LABEL)) for it in items}


def _last_acked(run: Run, name: str, before: float = float("inf")) -> float:
    return max((o.renew for o in run.ops if o.kind == "renew" and o.lease == name and o.status == 200
                and o.end <= before), default=0.0)


async def _pending(s: aiohttp.ClientSession, tier: str) -> int:
    """The tier's Leases whose newest renewal the control plane has not seen (its nodetier_leases_pending)."""
    async with s.get(f"{tier}/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith("nodetier_leases_pending "):
                return int(float(line.split()[1]))
    return 0


async def fault(run: Run, plane: Plane, s: aiohttp.ClientSession) -> None:
    if run.name in ("tier-kill", "tier-restart"):
        # stop the tier while it holds renewals the control plane has not seen (every second renewal is
        # forwarded: half the time none is pending), so the loss a SIGKILL may cause, and the flush a SIGTERM
        # does, are both exercised
        deadline = run.now() + 2 * PERIOD
        while run.now() < deadline and await _pending(s, plane.tier.base) == 0:
            await asyncio.sleep(0.1)
        run.pending_at_fault = await _pending(s, plane.tier.base)
    run.fault_at = run.now()
    if run.name == "tier-kill":
        await asyncio.to_thread(plane.kill_tier)
        run.cp_at_fault = {n: v[0] for n, v in (await _control_plane_renewals(s, plane.api.base)).items()}
        await asyncio.to_thread(plane.start_tier)
    elif run.name == "tier-restart":
        await asyncio.to_thread(plane.term_tier)
        run.cp_at_fault = {n: v[0] for n, v in (await _control_plane_renewals(s, plane.api.base)).items()}
        await asyncio.sleep(TIER_DOWN)
        await asyncio.to_thread(plane.start_tier)
    elif run.name == "control-plane-kill":
        await asyncio.to_thread(plane.api.kill)
        await asyncio.sleep(OUTAGE)
        await asyncio.to_thread(plane.api.restart_process)
        if not await asyncio.to_thread(plane.api.wait_ready, 60):
            run.notes.append("the apiserver was not ready 60 s after its restart")
    elif run.name == "lease-etcd-kill":
        await asyncio.to_thread(plane.lease_etcd.kill)
        await asyncio.sleep(OUTAGE)
        await asyncio.to_thread(plane.lease_etcd.restart)
    run.fault_end = run.now()


async def run_node_scenario(name: str, *, seed: int = 1, duration: float = 40.0) -> dict:
    """One scenario: start everything, the traffic for `duration` seconds (the fault a quarter in), stop the
    traffic, stop the tier with SIGTERM, read the control plane, check. Returns the result (JSON-able)."""
    assert name in NODE_SCENARIOS, name
    kube_controller_manager_binary()        # built before anything starts (tools/build_kube_controller_manager.py)
    rng = random.Random(seed)
    run = Run(name, seed)
    wall0 = time.monotonic()
    plane = await asyncio.to_thread(Plane)
    final_cp: dict[str, tuple[float, str | None]] = {}
    taints: set[str] = set()
    dead_events: set[str] = set()
    unknown_at: float | None = None
    alive: dict[str, bool] = {}
    tier_metrics: dict[str, float] = {}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s:
            cp, tier = plane.api.base, plane.tier.base
            for n in LIVE + [DEAD]:
                async with s.post(f"{cp}/api/v1/nodes", json=ready_node(n, "robustness kubelet")) as r:
                    assert r.status == 201, (n, r.status, await r.text())
                async with s.post(f"{tier}{LEASES}", json=lease_obj(n)) as r:
                    assert r.status == 201, (n, r.status, await r.text())
            await asyncio.to_thread(plane.kcm.start)
            watcher = asyncio.create_task(watch_nodes(run, s, cp, stop_watch := asyncio.Event()))
            if not await asyncio.to_thread(_kcm_healthy, plane.kcm, 60.0):
                raise RuntimeError(f"kube-controller-manager not healthy: {plane.kcm.log()[-2000:]}")
            stop = asyncio.Event()
            run.t0 = run.now()                           # the traffic's clock
            kubelets = {n: Kubelet(run, s, tier, n, random.Random(rng.random())) for n in LIVE + [DEAD]}
            tasks = [asyncio.create_task(k.loop()) for k in kubelets.values()]
            tasks += [asyncio.create_task(reader(run, s, tier, n, stop, random.Random(rng.random()))) for n in LIVE]
            tasks += [asyncio.create_task(editor(run, s, tier, n, stop, random.Random(rng.random()))) for n in LIVE]
            await asyncio.sleep(PERIOD + 2 * MONITOR)    # every kubelet renewed once; the controller saw the nodes
            kubelets[DEAD].stop.set()                    # its node must go Unknown
            t_fault = run.now() + 2.0 * PERIOD + rng.random() * PERIOD
            await asyncio.sleep(t_fault - run.now())
            if name != "node-none":
                await fault(run, plane, s)
            # the traffic goes on until the stopped node is due Unknown (and past it, by the bound)
            dead_last = _last_acked(run, DEAD)
            deadline = dead_last + GRACE + 12
            while run.now() < max(deadline, run.t0 + duration):
                if run.ready_seen.get(DEAD, [])[-1:] == ["Unknown"] and run.now() >= run.t0 + duration:
                    break
                await asyncio.sleep(0.5)
            for k in kubelets.values():
                k.stop.set()
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            stop_watch.set()
            await watcher
            alive = plane.alive()
            async with s.get(f"{tier}/metrics") as r:
                tier_metrics = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                                for line in (await r.text()).splitlines()
                                if line.startswith(("nodetier_renewals", "nodetier_forwards_total"))}
            async with s.get(f"{cp}/api/v1/nodes/{DEAD}") as r:
                dead_node = await r.json(content_type=None)
            taints = {t["effect"] for t in (dead_node.get("spec") or {}).get("taints") or [] if t["key"] == TAINT}
            ready = next((c for c in dead_node["status"]["conditions"] if c["type"] == "Ready"), {})
            if ready.get("status") == "Unknown":
                unknown_at = parse_time(ready.get("lastTransitionTime"))
            async with s.get(f"{cp}/api/v1/namespaces/default/events",
                             params={"fieldSelector": f"involvedObject.name={DEAD}"}) as r:
                dead_events = {(e.get("source") or {}).get("component", "") + "/" + e.get("reason", "")
                               for e in (await r.json(content_type=None)).get("items") or []}
            # the tier forwards every pending renewal as it stops: then the control plane must hold them all
            await asyncio.to_thread(plane.term_tier)
            final_cp = await _control_plane_renewals(s, cp)
    finally:
        await asyncio.to_thread(plane.stop)
    result = {"scenario": name, "seed": seed, "mode": "node-plane", "wall_s": round(time.monotonic() - wall0, 1),
              "ops": len(run.ops), "acknowledged": sum(o.status == 200 for o in run.ops if o.kind in ("renew", "edit")),
              "renewals": sum(o.status == 200 for o in run.ops if o.kind == "renew"),
              "reads": sum(o.status == 200 for o in run.ops if o.kind in ("read", "get")),
              "fault_s": round(run.fault_end - run.fault_at, 2) if run.fault_at and run.fault_end else None,
              "fault_at_s": round(run.fault_at - run.t0, 2) if run.fault_at else None,
              "renewals_during_fault": sum(o.kind == "renew" and o.status == 200 and run.fault_at <= o.start
                                           and o.end <= run.fault_end for o in run.ops) if run.fault_end else None,
              "renewal_conflicts": sum(o.kind == "renew" and o.status == 409 for o in run.ops),
              "pending_at_fault": run.pending_at_fault,
              "cp_behind_at_fault_s": {n: round(_last_acked(run, n, before=run.fault_at) - t, 2)
                                       for n, t in run.cp_at_fault.items()},
              "ready_seen": run.ready_seen, "poll_errors": run.poll_errors, "alive": alive,
              "dead_unknown_after_s": round(unknown_at - _last_acked(run, DEAD), 1) if unknown_at else None,
              "dead_taints": sorted(taints), "dead_events": sorted(dead_events), "tier_metrics": tier_metrics,
              "notes": run.notes}
    violations = check(run, final_cp, unknown_at, taints, alive, dead_events)
    result["violations"] = violations
    # the columns of the suite's table (scenarios.table, summary)
    result["lost"] = sum(v["checker"] == "writes" for v in violations)
    result["linearizability"] = sum(v["checker"] == "linearizability" for v in violations)
    result["other_violations"] = len(violations) - result["lost"] - result["linearizability"]
    result["passed"] = not violations
    return result


def run_one(name: str, seed: int = 1, duration: float = 40.0) -> dict:
    """One scenario in a process of its own (a process pool's worker: a plain function to pickle)."""
    return asyncio.run(run_node_scenario(name, seed=seed, duration=duration))


# --- checkers ------------------------------------------------------------------------------------------------

def _v(checker: str, text: str) -> dict:
    return {"checker": checker, "message": text}


def check_linearizable(run: Run, name: str) -> list[dict]:
    """The tier's answers for one Lease against a register with conditional writes (see the module)."""
    out = []
    ops = [o for o in run.ops if o.lease == name]
    versions: dict[int, tuple[float, str | None]] = {}
    for o in ops:
        if o.status != 200 or o.rv is None:
            continue
        value = (o.renew, o.label)      # a renewal's answer carries what it sent, an edit's its label (below)
        if o.rv in versions and versions[o.rv] != value:
            out.append(_v("linearizability", f"{name}: resourceVersion {o.rv} answered as {versions[o.rv]} "
                                             f"and as {value}"))
        versions.setdefault(o.rv, value)
    for o in ops:
        if o.kind in ("renew", "edit") and o.status == 200 and o.sent != (o.renew, o.label)[o.kind == "edit"]:
            out.append(_v("linearizability", f"{name}: a {o.kind} sent {o.sent!r} and was answered "
                                             f"{(o.renew, o.label)}"))
    rvs = sorted(versions)
    # a successful conditional write follows its precondition with no version in between
    for o in ops:
        if o.kind == "renew" and o.status == 200:
            between = [r for r in rvs if o.pre_rv < r < o.rv]
            if o.rv <= o.pre_rv or between:
                out.append(_v("linearizability", f"{name}: a renewal conditioned on {o.pre_rv} was answered "
                                                 f"{o.rv}, with versions {between[:3]} in between (a lost update)"))
    # real time: what completed before an operation started is not newer than what it saw or wrote
    acked = sorted((o for o in ops if o.status == 200 and o.rv is not None), key=lambda o: o.end)
    for o in acked:
        older = [p for p in acked if p.end < o.start and p.rv > o.rv]
        if older:
            p = older[0]
            out.append(_v("linearizability", f"{name}: {o.kind} at {o.start - run.t0:.2f} s answered version "
                                             f"{o.rv}, older than {p.rv} which a {p.kind} saw or wrote by "
                                             f"{p.end - run.t0:.2f} s (a stale answer)"))
    # renewTime does not go back along the versions, except once across a SIGKILL of the tier, by less than
    # the renewals it had not forwarded (the forward interval)
    prev = None
    for rv in rvs:
        renew = versions[rv][0]
        if prev is not None and renew + 1e-6 < prev[1]:
            back = prev[1] - renew
            allowed = FORWARD if run.name == "tier-kill" else 0.0
            if back > allowed:
                out.append(_v("linearizability", f"{name}: renewTime went back {back:.2f} s from version {prev[0]} "
                                                 f"to {rv} (allowed: {allowed:.0f} s)"))
        prev = (rv, max(renew, prev[1]) if prev else renew)
    return out


def check(run: Run, final_cp: dict, unknown_at: float | None, taints: set[str], alive: dict,
          dead_events: set[str]) -> list[dict]:
    """The violations of a run. `dead_events`: the stopped node's events, "<source component>/<reason>"."""
    out: list[dict] = []
    for n in LIVE + [DEAD]:
        out += check_linearizable(run, n)
    # no acknowledged write lost: at the fault ...
    if run.name in ("tier-kill", "tier-restart"):
        allowed = FORWARD if run.name == "tier-kill" else 0.0
        for n in LIVE:
            acked = _last_acked(run, n, before=run.fault_at)
            back = acked - run.cp_at_fault.get(n, 0.0)
            if back > allowed + 1e-6:
                out.append(_v("writes", f"{n}: at the {run.name} the control plane's renewTime trailed the last "
                                        f"acknowledged renewal by {back:.2f} s (allowed {allowed:.0f} s)"))
    # ... and at the end, once the tier forwarded what it held as it stopped
    for n in LIVE + [DEAD]:
        acked = _last_acked(run, n)
        cp_renew, cp_label = final_cp.get(n, (0.0, None))
        if cp_renew + 1e-6 < acked:
            out.append(_v("writes", f"{n}: the control plane ends with renewTime {micro_time(cp_renew)}, the last "
                                    f"acknowledged renewal was {micro_time(acked)}"))
        edits = [o for o in run.ops if o.kind == "edit" and o.lease == n]
        last = max((o for o in edits if o.status == 200), key=lambda o: o.rv, default=None)
        if last is not None:
            later = {o.sent for o in edits if o.start > last.start and o.status != 200 and o.status not in (409, 422)}
            if cp_label != last.label and cp_label not in later:
                out.append(_v("writes", f"{n}: the control plane ends with label {cp_label!r}, the last acknowledged "
                                        f"edit set {last.label!r}"))
    # the tier answers renewals while the control plane (or the Lease etcd) is away
    if run.name in ("control-plane-kill", "lease-etcd-kill") and run.fault_at and run.fault_end:
        for n in LIVE:
            during = [o for o in run.ops if o.kind == "renew" and o.lease == n
                      and run.fault_at <= o.start and o.end <= run.fault_end]
            # 409: the kubelet's version was stale (an edit came between): an answer, upstream's; it GETs and
            # renews again
            bad = [o.status for o in during if o.status not in (200, 409)]
            if bad:
                out.append(_v("availability", f"{n}: renewals during the {run.name} answered {bad[:5]}"))
        if run.fault_end - run.fault_at < OUTAGE:
            out.append(_v("availability", f"the outage lasted {run.fault_end - run.fault_at:.1f} s"))
        if not any(o.kind == "renew" and o.status == 200 and run.fault_at <= o.start and o.end <= run.fault_end
                   for o in run.ops):
            out.append(_v("availability", f"no renewal was answered during the {run.name}"))
    # the controller manager's verdicts
    for n in LIVE:
        seen = run.ready_seen.get(n, [])
        if "True" not in seen or seen[seen.index("True"):] != ["True"]:
            out.append(_v("controller", f"{n} (live) went {seen}"))
    dead_last = _last_acked(run, DEAD)
    if unknown_at is None:
        out.append(_v("controller", f"{DEAD} never went Ready=Unknown (seen {run.ready_seen.get(DEAD)})"))
    else:
        after = unknown_at - dead_last          # lastTransitionTime is in whole seconds: up to 1 s early
        if not GRACE - 1 <= after <= GRACE + 10:
            out.append(_v("controller", f"{DEAD} went Unknown {after:.1f} s after its last renewal (allowed "
                                        f"{GRACE} to {GRACE + 10} s)"))
        if not {"NoSchedule", "NoExecute"} <= taints:
            out.append(_v("controller", f"{DEAD} has the {TAINT} taints {sorted(taints)}, not NoSchedule and "
                                        f"NoExecute"))
        if "node-controller/NodeNotReady" not in dead_events:
            out.append(_v("controller", f"{DEAD} went Unknown without the controller's NodeNotReady event "
                                        f"(its events: {sorted(dead_events)})"))
    for proc, up in alive.items():
        if not up:
            out.append(_v("crash", f"{proc} was not running at the end"))
    out += [_v("fault", n) for n in run.notes]
    return out
