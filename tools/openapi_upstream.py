"""Extract from the reference kube-apiserver what apiserver/openapi.py serves verbatim.

    python tools/openapi_upstream.py            # starts etcd + the reference kube-apiserver, writes the file
    python tools/openapi_upstream.py --check    # exits 1 if the committed file differs from a fresh extract

Writes `apiserver/openapi_upstream.json`:

* `schemas`: the OpenAPI v3 schemas (components.schemas, as kube-apiserver v1.37.2 serves them) of every
  built-in kind this project serves, their lists, their subresources' kinds, and everything they reference, plus the meta types the
  operations and discovery documents use (DeleteOptions, Status, Patch, WatchEvent, APIResourceList,
  APIVersions, APIGroupList, APIGroup, version.Info). Upstream generates them from the Go types'
  comments and tags (k8s.io/kubernetes pkg/generated/openapi, apiextensions-apiserver's generated
  openapi) and kube-openapi's builder3; the v2 definitions are derived from these by openapi.py.
* `kinds`: `group/version/kind` -> schema name of those kinds.
* `meta_gvks`: every group version DeleteOptions and WatchEvent are registered in (the v2 document lists
  them all; a v3 group-version document only the core one and its own).
* `parameters`: the query and path parameters of the resource operations, by name (the `fieldManager`
  of PATCH differs: `fieldManager+patch`), as documented by the Go option types.

And `machinery/strategic_merge.json`, derived from those schemas (`strategic_merge_tables`): per built-in
resource (plural), every list field strategic merge patch merges, as a dotted path (`[]` steps into the
elements of a list) -> its merge key (null for a list of scalars merged as a set). These are the published
`x-kubernetes-patch-strategy` / `x-kubernetes-patch-merge-key` of the Go types' `patchStrategy` /
`patchMergeKey` tags, which upstream's strategic merge patch follows (`PatchMetaFromStruct`); list-map keys
(`x-kubernetes-list-map-keys`) only matter to server-side apply and are not used. machinery/patch.py reads it.

The tests compare what our server serves with a running kube-apiserver; these files only need
regenerating when the reference version changes (tests/test_http_discovery.py fails when they are stale).
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tools/ is not a package
import generated  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "apiserver", "openapi_upstream.json")
SMP_OUT = os.path.join(ROOT, "machinery", "strategic_merge.json")

META = "io.k8s.apimachinery.pkg.apis.meta.v1."
# The parameters of the operations this project serves (connect/log/exec options are not).
PARAMETERS = {"allowWatchBookmarks", "continue", "dryRun", "fieldManager", "fieldManager+patch", "fieldSelector",
              "fieldValidation", "force", "gracePeriodSeconds", "ignoreStoreReadErrorWithClusterBreakingPotential",
              "labelSelector", "limit", "namespace", "orphanDependents", "pretty", "propagationPolicy",
              "resourceVersion", "resourceVersionMatch", "sendInitialEvents", "shardSelector", "timeoutSeconds",
              "watch"}
EXTRA_ROOTS = [META + n for n in ("DeleteOptions", "Status", "Patch", "WatchEvent", "APIResourceList",
                                  "APIVersions", "APIGroupList", "APIGroup")] + ["io.k8s.apimachinery.pkg.version.Info"]


def _refs(x, acc: set) -> set:
    if isinstance(x, dict):
        for k, v in x.items():
            if k == "$ref" and isinstance(v, str):
                acc.add(v.rsplit("/", 1)[-1])
            else:
                _refs(v, acc)
    elif isinstance(x, list):
        for v in x:
            _refs(v, acc)
    return acc


def extract(get) -> dict:
    """`get(path)` -> parsed JSON of the reference server's answer."""
    sys.path.insert(0, ROOT)
    from machinery.resources import BUILTINS  # noqa: PLC0415 (tools/ is not on the path by default)

    index = get("/openapi/v3")["paths"]
    # api/v1 first: the meta schemas are taken from the first document that has them, and only the core
    # document's DeleteOptions/WatchEvent list just the core group version.
    wanted = sorted((k for k in index if k in ("api", "apis", "version") or k.startswith(("api/", "apis/"))),
                    key=lambda k: (k != "api/v1", k))
    docs = {k: get(index[k]["serverRelativeURL"]) for k in wanted}
    all_schemas: dict = {}
    for d in docs.values():
        for name, s in d.get("components", {}).get("schemas", {}).items():
            all_schemas.setdefault(name, s)
    kinds: dict[str, str] = {}
    # every built-in kind and its list, and the kinds of their subresources (autoscaling/v1 Scale, Binding,
    # Eviction, TokenRequest, ...; not the connect subresources' *Options, which are query parameters)
    gvks = {(r.group, r.version, kind) for r in BUILTINS for kind in (r.kind, r.list_kind)}
    gvks |= {(s.group or r.group, s.version or r.version, s.kind) for r in BUILTINS for s in r.subresources
             if not s.kind.endswith("Options")}
    for group, version, kind in sorted(gvks):
        gvk = {"group": group, "kind": kind, "version": version}
        names = [n for n, s in all_schemas.items() if gvk in s.get("x-kubernetes-group-version-kind", [])]
        if len(names) != 1:
            raise SystemExit(f"no single schema for {gvk}: {names}")
        kinds[f"{group}/{version}/{kind}"] = names[0]
    todo = list(kinds.values()) + EXTRA_ROOTS
    closure: dict = {}
    while todo:
        n = todo.pop()
        if n in closure:
            continue
        closure[n] = all_schemas[n]
        todo.extend(_refs(closure[n], set()))
    params: dict = {}
    for d in docs.values():
        for item in d.get("paths", {}).values():
            for verb, op in item.items():
                for p in (op if verb == "parameters" else op.get("parameters", [])):
                    if p["in"] == "path" and p["name"] == "name":
                        continue  # "name of the <Kind>"
                    key = p["name"] + ("+patch" if verb == "patch" and p["name"] == "fieldManager" else "")
                    if key in PARAMETERS:
                        params.setdefault(key, p)
    v2 = get("/openapi/v2")["definitions"]
    meta_gvks = {k: v2[META + k]["x-kubernetes-group-version-kind"] for k in ("DeleteOptions", "WatchEvent")}
    return {"source": "kube-apiserver /openapi/v3 and /openapi/v2 (tools/openapi_upstream.py)",
            "kinds": dict(sorted(kinds.items())),
            "meta_gvks": meta_gvks,
            "parameters": dict(sorted(params.items())),
            "schemas": dict(sorted(closure.items()))}


def _ref_of(prop: dict) -> str | None:
    """The schema a property refers to: `$ref`, or v3's `allOf: [{$ref}]` wrapper."""
    if "$ref" in prop:
        return prop["$ref"].rsplit("/", 1)[-1]
    return next((a["$ref"].rsplit("/", 1)[-1] for a in prop.get("allOf", []) if "$ref" in a), None)


def _merge_lists(schemas: dict, name: str, path: str, out: dict, stack: frozenset) -> None:
    if name in stack:  # recursive types (JSONSchemaProps): upstream's tags repeat, the paths would not end
        return
    stack = stack | {name}
    for field, prop in schemas[name].get("properties", {}).items():
        fp = f"{path}.{field}" if path else field
        if prop.get("type") == "array":
            if "merge" in prop.get("x-kubernetes-patch-strategy", "").split(","):
                out[fp] = prop.get("x-kubernetes-patch-merge-key")
            ref = _ref_of(prop.get("items", {}))
            if ref:
                _merge_lists(schemas, ref, fp + "[]", out, stack)
        else:
            ref = _ref_of(prop)
            if ref:
                _merge_lists(schemas, ref, fp, out, stack)


def strategic_merge_tables(data: dict) -> dict:
    """machinery/strategic_merge.json from the extracted schemas (`data`: openapi_upstream.json's content)."""
    sys.path.insert(0, ROOT)
    from machinery.resources import BUILTINS  # noqa: PLC0415
    out: dict = {}
    for r in sorted(BUILTINS, key=lambda r: r.plural):
        assert r.plural not in out, f"two served kinds named {r.plural}"
        table: dict = {}
        _merge_lists(data["schemas"], data["kinds"][f"{r.group}/{r.version}/{r.kind}"], "", table, frozenset())
        out[r.plural] = dict(sorted(table.items()))
    return out


def _start_and_extract() -> dict:
    with generated.reference("/registry-openapi") as (api, _):
        return extract(generated.json_getter(api))


def render(data: dict) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    def extract_all() -> dict[str, str]:
        data = _start_and_extract()
        return {OUT: render(data), SMP_OUT: render(strategic_merge_tables(data))}
    return generated.main(__doc__.splitlines()[0], "python tools/openapi_upstream.py", extract_all, argv)


if __name__ == "__main__":
    sys.exit(main())
