"""A recipe is a TOML file (read with the standard library's `tomllib`) in `recipes/catalog/`: the processes of
a control plane and their flags, the etcd stores and which resources each holds, the seams it uses, the
workload that tests it, the SLOs it must meet and its budget. `load(name)` reads one into a `Recipe`;
anything the runner would not understand is refused here, with the file and the key in the message.

    name = "node-plane"                 # the file's stem
    title = "Node Plane"
    rung = 3                            # its place on the ladder (0: a recipe for one axis)
    axis = "node"                       # node | churn | state | mixed
    seams = [1, 2]                      # 1 storage contract, 2 node liveness, 3 shard axis, 4 cache residency
    implementations = ["ours", "kube"]  # which apiserver can run it ("kube": stock components only)
    summary = "..."

    [size]                              # what --scale N sets, and the two named scales
    name = "nodes"
    small = 40
    full = 5000

    [budget]
    cores = 2
    memory_gib = 8

    [[stores]]                          # etcd members; the first without `resources` holds the rest
    name = "leases"
    resources = ["coordination.k8s.io/leases"]
    durability = "none"                 # fsync | none (--unsafe-no-fsync, data on tmpfs)

    [[processes]]
    kind = "apiserver"                  # see KINDS
    count = 2
    flags = ["--max-requests-inflight=800"]

    [[workload]]                        # parts, driven together; a number, "size" or "<x>*size"
    kind = "nodes"
    nodes = "size"

    [slo]
    window_s = { small = 30, full = 300 }
"""
from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from dataclasses import dataclass, field

CATALOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "catalog")

AXES = ("node", "churn", "state", "mixed")
SEAMS = {1: "storage contract (which store holds which resources: --etcd-servers-overrides)",
         2: "node liveness (how heartbeats reach the control plane)",
         3: "shard axis (the UID hash ranges controllers, caches and stores agree on, KEP-5866)",
         4: "cache residency (what an apiserver keeps in memory)"}
IMPLEMENTATIONS = ("ours", "kube")

# Process kinds the runner starts, with the keys each accepts besides kind/name/count/flags.
KINDS: dict[str, frozenset[str]] = {
    # N apiservers behind one address (a TCP balancer when N > 1); ours or kube-apiserver per implementation
    "apiserver": frozenset(),
    # ours only: `python -m deployment`, K resident shards and N fronts on one address
    "deployment": frozenset({"shards", "fronts"}),
    # ours only: the node-facing tier (`python -m nodetier`), N of them splitting the nodes (--tiers)
    "nodetier": frozenset(),
    "kube-scheduler": frozenset(),
    "kube-controller-manager": frozenset({"controllers"}),
    # the simulated kubelets: one kwok process per `count`, each holding a share of the nodes
    "kwok": frozenset(),
    # ours only: sharded Widget controllers (`python -m shardslice controller`), one per hash range
    "slice-controllers": frozenset({"workers"}),
}
OURS_ONLY = frozenset({"deployment", "nodetier", "slice-controllers"})

WORKLOADS: dict[str, frozenset[str]] = {
    # kwok Nodes: created, kept Ready by kwok's Lease renewals; reads of nodes by a probe
    "nodes": frozenset({"nodes", "probe_qps"}),
    # short-lived custom resources (Widgets): created at `rate`/s, deleted after `lifetime_s`, watched
    "churn": frozenset({"rate", "lifetime_s", "namespaces", "watchers"}),
    # realistic ConfigMaps loaded first, then read: GETs, namespace lists and cluster lists, a few updates
    "state": frozenset({"objects", "namespaces", "get_qps", "list_qps", "cluster_list_every_s", "update_qps"}),
    # Deployments whose Pods kube-controller-manager creates, kube-scheduler binds and kwok runs, at a steady
    # `pods_per_second` (upstream's steady state is at most 20 pod changes a second)
    "pods": frozenset({"pods_per_second", "replicas", "namespaces"}),
}


class RecipeError(ValueError):
    pass


@dataclass
class Store:
    name: str
    resources: list[str] = field(default_factory=list)
    durability: str = "fsync"

    @property
    def default(self) -> bool:
        return not self.resources


@dataclass
class Process:
    kind: str
    name: str
    count: int = 1
    flags: list[str] = field(default_factory=list)
    options: dict = field(default_factory=dict)


@dataclass
class Part:
    kind: str
    params: dict

    def value(self, key: str, size: float, default=None):
        """A parameter at this run's size: a number, "size", or "<x>*size" (at least 1 where it scales)."""
        v = self.params.get(key, default)
        if isinstance(v, str):
            m = _SIZED.fullmatch(v.replace(" ", ""))
            factor = float(m.group(1) or 1.0)
            return max(1, round(factor * size))
        return v


_SIZED = re.compile(r"(?:([0-9.]+)\*)?size")


@dataclass
class Recipe:
    name: str
    title: str
    rung: int
    axis: str
    seams: list[int]
    implementations: list[str]
    summary: str
    size_name: str
    sizes: dict[str, float]
    budget: dict
    stores: list[Store]
    processes: list[Process]
    workload: list[Part]
    window_s: dict[str, float]
    path: str = ""

    def size(self, scale: str) -> float:
        """--scale small|full|N: the named sizes, or N itself."""
        if scale in self.sizes:
            return self.sizes[scale]
        try:
            n = float(scale)
        except ValueError:
            raise RecipeError(f"--scale must be small, full or a number, not {scale!r}") from None
        if n <= 0:
            raise RecipeError("--scale must be positive")
        return n

    def window(self, scale: str) -> float:
        return self.window_s.get(scale, self.window_s["full"])   # a numeric scale gets the full run's window

    def process(self, kind: str) -> Process | None:
        return next((p for p in self.processes if p.kind == kind), None)

    def overrides(self) -> list[Store]:
        return [s for s in self.stores if not s.default]

    def etcd_flags(self, url) -> list[str]:
        """An apiserver's --etcd-servers and --etcd-servers-overrides, given each store's client URL
        (`url(store)`: a loopback port, or a Service's DNS name in the manifests)."""
        main = next(s for s in self.stores if s.default)
        flags = [f"--etcd-servers={url(main)}"]
        over = [f"{r}#{url(s)}" for s in self.overrides() for r in s.resources]
        if over:
            flags.append(f"--etcd-servers-overrides={','.join(over)}")
        return flags


def customized(r: Recipe, *, shards: int | None = None, fronts: int | None = None, without: tuple[str, ...] = (),
               apiserver_flags: tuple[str, ...] = ()) -> Recipe:
    """`r` with `recipes up`'s changes: K shards (a deployment's, and one sharded controller per shard), N fronts,
    process kinds left out, flags added to the apiserver or deployment entry. Anything that does not apply to the
    recipe is refused rather than ignored."""
    if shards is not None and shards < 1 or fronts is not None and fronts < 1:
        raise RecipeError("--shards and --fronts must be at least 1")
    kinds = {p.kind for p in r.processes}
    if (shards is not None or fronts is not None) and "deployment" not in kinds:
        raise RecipeError(f"recipe {r.name} runs no deployment: --shards and --fronts do not apply")
    for k in without:
        if k in ("apiserver", "deployment") or k not in kinds:
            raise RecipeError(f"--without {k}: recipe {r.name}'s processes that may be left out are "
                              f"{', '.join(sorted(kinds - {'apiserver', 'deployment'})) or 'none'}")
    procs = []
    for p in r.processes:
        if p.kind in without:
            continue
        p = dataclasses.replace(p, flags=list(p.flags), options=dict(p.options))
        if p.kind == "deployment":
            p.options.update({k: v for k, v in (("shards", shards), ("fronts", fronts)) if v is not None})
        if p.kind == "slice-controllers" and shards is not None:
            p.count = shards          # one controller per shard's hash range
        if p.kind in ("apiserver", "deployment"):
            p.flags += list(apiserver_flags)
        procs.append(p)
    return dataclasses.replace(r, processes=procs)


def names() -> list[str]:
    return sorted(f[:-5] for f in os.listdir(CATALOG) if f.endswith(".toml"))


def load(name_or_path: str) -> Recipe:
    path = name_or_path if name_or_path.endswith(".toml") else os.path.join(CATALOG, f"{name_or_path}.toml")
    if not os.path.exists(path):
        raise RecipeError(f"no recipe {name_or_path!r}; known: {', '.join(names())}")
    with open(path, "rb") as f:
        try:
            doc = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise RecipeError(f"{path}: {e}") from None
    return parse(doc, path)


def load_all() -> list[Recipe]:
    return sorted((load(n) for n in names()), key=lambda r: (r.rung == 0, r.rung, r.name))


def parse(doc: dict, path: str = "<recipe>") -> Recipe:
    def need(d: dict, key: str, typ, where: str):
        if key not in d:
            raise RecipeError(f"{path}: {where}{key} is required")
        if not isinstance(d[key], typ):
            raise RecipeError(f"{path}: {where}{key} must be {getattr(typ, '__name__', typ)}")
        return d[key]

    known = {"name", "title", "rung", "axis", "seams", "implementations", "summary", "size", "budget", "stores",
             "processes", "workload", "slo"}
    extra = set(doc) - known
    if extra:
        raise RecipeError(f"{path}: unknown keys {sorted(extra)}")
    name = need(doc, "name", str, "")
    stem = os.path.basename(path)[:-5] if path.endswith(".toml") else name
    if name != stem:
        raise RecipeError(f"{path}: name {name!r} must be the file's stem {stem!r}")
    axis = need(doc, "axis", str, "")
    if axis not in AXES:
        raise RecipeError(f"{path}: axis must be one of {AXES}")
    seams = doc.get("seams", [])
    if not all(s in SEAMS for s in seams):
        raise RecipeError(f"{path}: seams must be among {sorted(SEAMS)}")
    impls = doc.get("implementations", ["ours"])
    if not impls or not all(i in IMPLEMENTATIONS for i in impls):
        raise RecipeError(f"{path}: implementations must be among {IMPLEMENTATIONS}")
    size = need(doc, "size", dict, "")
    sizes = {k: float(need(size, k, (int, float), "size.")) for k in ("small", "full")}
    stores = []
    for i, s in enumerate(doc.get("stores", [{"name": "main"}])):
        st = Store(need(s, "name", str, f"stores[{i}]."), list(s.get("resources", [])), s.get("durability", "fsync"))
        if st.durability not in ("fsync", "none"):
            raise RecipeError(f"{path}: stores[{i}].durability must be fsync or none")
        stores.append(st)
    if sum(s.default for s in stores) != 1:
        raise RecipeError(f"{path}: exactly one store must hold the default (no `resources`)")
    procs = []
    for i, p in enumerate(need(doc, "processes", list, "")):
        kind = need(p, "kind", str, f"processes[{i}].")
        if kind not in KINDS:
            raise RecipeError(f"{path}: processes[{i}].kind {kind!r} is not one of {sorted(KINDS)}")
        opts = {k: v for k, v in p.items() if k not in ("kind", "name", "count", "flags")}
        bad = set(opts) - KINDS[kind]
        if bad:
            raise RecipeError(f"{path}: processes[{i}] ({kind}) has unknown keys {sorted(bad)}")
        count = p.get("count", 1)
        if not isinstance(count, int) or count < 1:
            raise RecipeError(f"{path}: processes[{i}].count must be a positive integer")
        procs.append(Process(kind, p.get("name", kind), count, list(p.get("flags", [])), opts))
    if sum(p.kind in ("apiserver", "deployment") for p in procs) != 1:
        raise RecipeError(f"{path}: exactly one apiserver or deployment process entry is required")
    if "kube" in impls and any(p.kind in OURS_ONLY for p in procs):
        raise RecipeError(f"{path}: kind(s) {sorted(OURS_ONLY & {p.kind for p in procs})} exist only in ours, "
                          "so the recipe cannot list implementation 'kube'")
    parts = []
    for i, w in enumerate(need(doc, "workload", list, "")):
        kind = need(w, "kind", str, f"workload[{i}].")
        if kind not in WORKLOADS:
            raise RecipeError(f"{path}: workload[{i}].kind {kind!r} is not one of {sorted(WORKLOADS)}")
        params = {k: v for k, v in w.items() if k != "kind"}
        bad = set(params) - WORKLOADS[kind]
        if bad:
            raise RecipeError(f"{path}: workload[{i}] ({kind}) has unknown keys {sorted(bad)}")
        for k, v in params.items():
            if isinstance(v, str) and not _SIZED.fullmatch(v.replace(" ", "")):
                raise RecipeError(f"{path}: workload[{i}].{k} must be a number, 'size' or '<x>*size'")
        parts.append(Part(kind, params))
    kinds = {p.kind for p in procs}
    if any(p.kind in ("nodes", "pods") for p in parts) and "kwok" not in kinds:
        raise RecipeError(f"{path}: a nodes or pods workload needs a kwok process")
    if any(p.kind == "pods" for p in parts) and not {"kube-scheduler", "kube-controller-manager"} <= kinds:
        raise RecipeError(f"{path}: a pods workload needs kube-scheduler and kube-controller-manager")
    slo = doc.get("slo", {})
    window = {"small": 30.0, "full": 300.0, **{k: float(v) for k, v in slo.get("window_s", {}).items()}}
    return Recipe(name=name, title=doc.get("title", name), rung=int(doc.get("rung", 0)), axis=axis, seams=list(seams),
                  implementations=list(impls), summary=doc.get("summary", ""), size_name=need(size, "name", str, "size."),
                  sizes=sizes, budget=dict(doc.get("budget", {})), stores=stores, processes=procs, workload=parts,
                  window_s=window, path=path)
