"""Tables, percentiles and plots for the benchmarks' reports, including the residency benchmark's table
and PNG (they read only its JSON document)."""
from __future__ import annotations

import os
import statistics

MIB = 1024.0 * 1024.0
# The residency benchmark's heap measures, in report order.
RESIDENCY_MEASURES = ("native", "tracemalloc", "rss")


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def render(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    rows = [header] + rows
    w = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(f"{c:<{w[i]}}" for i, c in enumerate(r)).rstrip() for r in rows)


def etcd_version_str(vers: dict) -> str:
    return vers["etcd"].get("etcdserver", "?") if isinstance(vers.get("etcd"), dict) else "?"


# --- the residency benchmark ------------------------------------------------------------------------------

def residency_table(doc: dict) -> str:
    lines = []
    v = doc["versions"]
    etcd_v = etcd_version_str(v)
    fl = doc["floor"]
    lines.append(f"# cache residency: heap per shard vs full replication; etcd {etcd_v}, Python {v['python']}, "
                 f"{v.get('cpu_affinity') or v['cpu_count']} cores ({v['cpu_model']}); all processes on one machine")
    lines.append(f"# empty-process floor (apiserver, cache on, empty prefix): tracemalloc {fl['tracemalloc'] / MIB:.1f} MiB, "
                 f"RSS {fl['rss'] / MIB:.1f} MiB, native {fl['native'] / 1024:.1f} KiB")
    src = doc.get("source")
    if src:   # --read-only: the data an etcd already held
        moved = ("" if src["revision_after"] == src["revision_before"] else
                 f" (MOVED to {src['revision_after']}: someone else wrote during the run)")
        lines.append(f"# read-only over {src['etcd_servers']} prefix {src['prefix']} at etcd revision "
                     f"{src['revision_before']}{moved}; every apiserver --read-only, nothing loaded or written")
        if src["unserved_keys_total"]:
            top = ", ".join(f"{n} {w}" for w, n in list(src["unserved_keys"].items())[:8])
            lines.append(f"# not measured: {src['unserved_keys_total']} of {src['etcd_keys']} keys belong to resources "
                         f"this apiserver does not serve ({top})")
    for name, pr in doc["profiles"].items():
        lines.append("")
        lines.append(f"## {pr['title']}: {pr['description']}")
        if pr["rbac_sharded"]:
            shards = ("--residency-full-resources " + pr["shard_full_resources"] +
                      " (RBAC sharded too; by default RBAC stays fully resident)")
        elif pr["shard_full_resources"].startswith("(default"):
            shards = "default residency (namespaces, CRDs and RBAC fully resident)"
        else:
            shards = "--residency-full-resources " + pr["shard_full_resources"]
        lines.append("#   shards: " + shards)
        hdr = (f"{'measure':<12} {'K':>2}  {'shard mean':>11} {'shard max':>11} {'sum shards':>11} "
               f"{'full':>11} {'mean/full':>9} {'ideal 1/K':>9} {'-floor':>7}  check")
        lines.append(hdr)
        for m in RESIDENCY_MEASURES:
            for run in pr["runs"]:
                d = run["summary"][m]
                af = d.get("above_floor_mean_over_full")
                lines.append(f"{m:<12} {run['k']:>2}  {d['shard_mean_bytes'] / MIB:>7.2f} MiB "
                             f"{d['shard_max_bytes'] / MIB:>7.2f} MiB {d['shard_sum_bytes'] / MIB:>7.2f} MiB "
                             f"{d['full_bytes'] / MIB:>7.2f} MiB {d['mean_over_full']:>9.3f} {1 / run['k']:>9.3f} "
                             f"{(f'{af:.3f}' if af is not None else '-'):>7}  "
                             f"{'pass' if run['check']['passed'] else 'FAIL'}")
        for run in pr["runs"]:
            if "uncompressed_full" in run:
                parts = [f"{m} {run['summary'][m]['uncompressed_full_bytes'] / MIB:.1f} MiB (compressed full / it "
                         f"{run['summary'][m]['full_over_uncompressed_full']:.3f}, shard mean / it "
                         f"{run['summary'][m]['mean_over_uncompressed_full']:.3f})" for m in RESIDENCY_MEASURES]
                lines.append(f"#   K={run['k']} against a full replica with --cache-compression=false: " + "; ".join(parts))
            nt = run.get("rss_without_tracemalloc")
            if nt:
                lines.append(f"#   K={run['k']} RSS of twins run without tracemalloc: shard mean "
                             f"{nt['shard_mean_bytes'] / MIB:.1f} MiB, full {nt['full_bytes'] / MIB:.1f} MiB, uncompressed "
                             f"full {nt['uncompressed_full_bytes'] / MIB:.1f} MiB: shard / uncompressed full "
                             f"{nt['shard_mean_over_uncompressed_full']:.3f}, shard / full {nt['shard_mean_over_full']:.3f}, "
                             f"full / uncompressed full {nt['full_over_uncompressed_full']:.3f}")
        if doc.get("source"):   # the advisor: where each resource's objects live, per K
            for run in pr["runs"]:
                parts = []
                for res, st in run["full"]["resources"].items():
                    if st["objects"]:
                        per = [sh["resources"][res]["objects"] for sh in run["shards"]]
                        sharded = run["shards"][0]["resources"][res]["partial"]
                        how = "+".join(map(str, per)) if sharded else f"{per[0]} in each (fully resident)"
                        parts.append(f"{res} {st['objects']}: {how}")
                lines.append(f"#   K={run['k']} resident objects (full replica: per shard): " + "; ".join(parts))
    lines.append("")
    lines.append("# native = entry+btree+bitmap+slots+history+snapshot bytes from /debug/residency; "
                 "-floor = (shard - empty floor) / (full - empty floor); check = union of sharded lists == full list "
                 "at the same RV, no object twice (writers stopped); a fully resident resource: every shard's list == full")
    mi = doc["micro"]
    if mi:
        lines.append(f"# in-process: drop non-resident Pod {mi['drop_nonresident_median_us']:.2f} us (keep resident "
                     f"{mi['keep_resident_median_us']:.2f} us; median per call); ingest {mi['ingest_events_per_s_full']:,.0f} "
                     f"events/s all resident, {mi['ingest_events_per_s_k2']:,.0f} with K=2 ({mi['ingest_events']} Pod events); "
                     f"label select over {mi['select_objects']:,}: bitmaps {mi['select_bitmap_median_ms']:.2f} ms vs "
                     f"scan {mi['select_scan_median_ms']:.0f} ms")
    lines.append("")
    lines.append("targets (reported, not asserted):")
    for t in doc["targets"]:
        where = f" [{t['profile']} K={t['k']}]" if "profile" in t else ""
        met = {True: "met", False: "NOT met", None: "n/a"}[t["met"]]
        lines.append(f"  {met:<8} {t['target']}{where}: {t['value']}")
    return "\n".join(lines)


def residency_plot(doc: dict, path: str) -> None:
    """Per profile: MiB per process against K, each measure's shard mean (bar up to the max) and full/K."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    profs = list(doc["profiles"].items())
    fig, axes = plt.subplots(1, len(profs), figsize=(5.5 * len(profs), 4.5), squeeze=False)
    colors = {"native": "tab:blue", "tracemalloc": "tab:orange", "rss": "tab:green"}
    for ax, (name, pr) in zip(axes[0], profs):
        ks = [r["k"] for r in pr["runs"]]
        for m in RESIDENCY_MEASURES:
            mean = [r["summary"][m]["shard_mean_bytes"] / MIB for r in pr["runs"]]
            mx = [r["summary"][m]["shard_max_bytes"] / MIB for r in pr["runs"]]
            full = statistics.mean(r["summary"][m]["full_bytes"] for r in pr["runs"]) / MIB
            ax.errorbar(ks, mean, yerr=[[0] * len(ks), [a - b for a, b in zip(mx, mean)]], marker="o",
                        color=colors[m], label=f"{m} per shard (mean, max)", capsize=3)
            ax.plot(ks, [full / k for k in ks], linestyle="--", color=colors[m], alpha=0.6, label=f"{m} ideal full/K")
        ax.axhline(doc["floor"]["rss"] / MIB, color="grey", linestyle=":", label="RSS floor (empty)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ks)
        ax.set_xticklabels([str(k) for k in ks])
        ax.set_xlabel("K (shards)")
        ax.set_ylabel("MiB per process")
        ax.set_title(f"{pr['title']} ({pr['workload_bytes'] / 1e6:.1f} MB of objects)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
