"""Extract the Table column definitions of every built-in resource from the reference kube-apiserver.

    python tools/table_columns_upstream.py            # starts etcd + the reference kube-apiserver, writes the file
    python tools/table_columns_upstream.py --check    # exits 1 if the committed file differs from a fresh extract

Writes `machinery/table_columns.json`: `"<group>/<resource>"` -> the `columnDefinitions` kube-apiserver v1.37.2
answers a Table request on that (empty) collection with (k8s.io/kubernetes pkg/printers/internalversion
printers.go, or rest.NewDefaultTableConvertor's Name / Created At for kinds without a printer), for the
preferred version of every resource its aggregated discovery lists with the `list` verb. machinery/tables.py
takes the headers from here; the cells are computed per kind there. tests/test_http_subresources.py compares
the committed file with a running kube-apiserver.
"""
from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generated  # noqa: E402 (tools/ is not a package)

ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "machinery", "table_columns.json")
AGG = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def extract(get) -> dict:
    """`get(path, accept)` -> parsed JSON of the reference server's answer."""
    out: dict = {}
    for head in ("/api", "/apis"):
        for group in get(head, AGG)["items"]:
            name = group["metadata"].get("name", "")
            version = group["versions"][0]  # the preferred version
            base = f"/api/{version['version']}" if not name else f"/apis/{name}/{version['version']}"
            for r in version["resources"]:
                if "list" in r["verbs"]:
                    out[f"{name}/{r['resource']}"] = get(f"{base}/{r['resource']}", TABLE)["columnDefinitions"]
    return dict(sorted(out.items()))


def render(data: dict) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    def extract_all() -> dict[str, str]:
        with generated.reference("/registry-tablecols") as (api, _):
            return {OUT: render(extract(lambda path, accept: generated.json_getter(api, accept)(path)))}
    return generated.main(__doc__.splitlines()[0], "python tools/table_columns_upstream.py", extract_all, argv)


if __name__ == "__main__":
    sys.exit(main())
