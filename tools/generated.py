"""What the extractors of committed files share (tools/discovery_upstream.py, tools/openapi_upstream.py):
the reference kube-apiserver over a fresh etcd, and the command line that writes the files, or with --check
compares them with a fresh extract."""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any, Callable, Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def reference(prefix: str) -> Iterator[tuple[Any, str]]:
    """(a tests.helpers.client.Api on a reference kube-apiserver with etcd prefix `prefix`, its etcd endpoint);
    both processes stopped on exit."""
    sys.path.insert(0, ROOT)
    from tests.helpers.client import Api  # noqa: PLC0415 (the project root is not on the path by default)
    from tests.helpers.etcd import current_etcd  # noqa: PLC0415
    from tests.helpers.kube import KubeApiserver  # noqa: PLC0415
    with current_etcd() as etcd, KubeApiserver(etcd.endpoint, prefix=prefix) as kube:
        yield Api(kube.url, cert=kube.client_cert, verify=kube.ca), etcd.endpoint


def json_getter(api, accept: str = "application/json") -> Callable[[str], Any]:
    """`get(path)` -> the parsed JSON answer (an error status raises)."""
    def get(path: str) -> Any:
        r = api.get(path, headers={"Accept": accept}, timeout=120)
        r.raise_for_status()
        return r.json()
    return get


def main(description: str, command: str, extract: Callable[[], dict[str, str]],
         argv: list[str] | None = None) -> int:
    """`extract()` -> {path: text}. Writes them, or with --check exits 1 naming each stale one."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing them")
    args = ap.parse_args(argv)
    texts = extract()
    stale = False
    for path, text in texts.items():
        if args.check:
            with open(path, encoding="utf-8") as f:
                if f.read() != text:
                    print(f"{path} is stale: run {command}", file=sys.stderr)
                    stale = True
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print(path, file=sys.stderr)
    return int(stale)
