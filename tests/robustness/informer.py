"""A client-go informer (dynamic, watch-list on) beside the traffic: tests/clientgo/robustinformer, built once
into .cache/go. After the fault it must converge to etcd's state (issue 10: within 10 s)."""
from __future__ import annotations

import json
import os
import subprocess
import time



def build() -> str:
    """The binary, built once into .cache/go (tools/build_repo_go.py; rebuilt when tests/clientgo changes)."""
    from tests.helpers.etcd import load_tool
    return load_tool("build_repo_go").ensure("robustinformer")


class Informer:
    def __init__(self, base: str, namespace: str, group: str, version: str, resource: str, log_path: str):
        self.argv = [build(), "--server", base, "--namespace", namespace, "--group", group, "--version", version,
                     "--resource", resource]
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Informer":
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                         text=True, env=dict(os.environ, KUBE_FEATURE_WatchListClient="true"))
        return self

    def dump(self) -> dict:
        """{"synced": bool, "items": {name: (rv, op)}} from the informer's store."""
        self.proc.stdin.write("dump\n")
        self.proc.stdin.flush()
        doc = json.loads(self.proc.stdout.readline())
        return {"synced": doc["synced"], "lastSyncRV": doc.get("lastSyncRV"),
                "items": {n: (int(rv), op or None) for n, (rv, op) in doc["items"].items()}}

    def converge(self, want: dict, timeout: float) -> tuple[float | None, dict]:
        """Seconds until the store equals `want` (None if not within `timeout`), and the last dump."""
        t0 = time.monotonic()
        last: dict = {}
        while True:
            if self.proc.poll() is not None:
                return None, {"exited": self.proc.returncode}
            last = self.dump()
            if last["synced"] and last["items"] == want:
                return time.monotonic() - t0, last
            if time.monotonic() - t0 > timeout:
                return None, last
            time.sleep(0.25)

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()   # an open pipe left to the garbage collector is a ResourceWarning under pytest
