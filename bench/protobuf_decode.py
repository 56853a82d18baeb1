"""Micro-benchmark of `storage.codec.decode_value` on kube-apiserver's protobuf values.

After a restart over an etcd that kube-apiserver wrote (protobuf storage, the `k8s\\x00` envelope), decoding
every value to the JSON object upstream would serve is most of our start. This measures that decoding alone,
per kind, on realistic objects (bench.workloads' shapes; the Pods carry the managedFields kube-apiserver
writes). The protobuf bytes come from Go: tests/go/protoref (`protoref encode`) turns each JSON object into
apimachinery's protobuf serialization and prints encoding/json of the object it decodes from those bytes;
every object our decoder produces is first checked byte for byte against that.

    .venv/bin/python -m bench.protobuf_decode                 # 2,000 objects per kind, best of 5
    .venv/bin/python -m bench.protobuf_decode --objects 500 --runs 3 --out bench/out/protobuf_decode.json

Prints objects/s and µs/object per kind for the compiled decoder (what decode_value runs), for the general
decoder (the straightforward reading of the schema, which decode_value ran alone before the compiled one, and
still runs for whatever the compiled one does not take on), and the JSON decode of the same object (orjson)
for scale.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from bench import workloads
from machinery import jsonenc, protobuf
from storage.codec import decode_value

ROOT = Path(__file__).resolve().parent.parent
GO_ENV = dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-mod=mod", CGO_ENABLED="0")


def _managed_fields_pod(i: int) -> dict:
    """bench.workloads.deployment_pod with the managedFields kube-apiserver keeps (kubelet and
    kube-controller-manager entries, FieldsV1 sets as upstream writes them)."""
    pod = workloads.deployment_pod(i)
    c = "k:{\"name\":\"web\"}"
    spec_fields = {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}, "f:tier": {}},
                                  "f:ownerReferences": {".": {}, "k:{\"uid\":\"%s\"}" % pod["metadata"]["ownerReferences"][0]["uid"]: {}}},
                   "f:spec": {"f:containers": {c: {".": {}, "f:env": {".": {}, **{f"k:{{\"name\":\"ENV_VAR_{k}\"}}": {".": {}, "f:name": {}, "f:value": {}} for k in range(3)}},
                                                   "f:image": {}, "f:imagePullPolicy": {}, "f:livenessProbe": {".": {}, "f:httpGet": {".": {}, "f:path": {}, "f:port": {}, "f:scheme": {}}},
                                                   "f:name": {}, "f:ports": {".": {}, "k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
                                                   "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                                                   "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}, "f:volumeMounts": {".": {}}}},
                              "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {},
                              "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}, "f:volumes": {".": {}}}}
    status_fields = {"f:status": {"f:conditions": {**{f"k:{{\"type\":\"{t}\"}}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}
                                                      for t in ("ContainersReady", "Initialized", "PodReadyToStartContainers", "Ready")}},
                                  "f:containerStatuses": {}, "f:hostIP": {}, "f:hostIPs": {}, "f:phase": {}, "f:podIP": {},
                                  "f:podIPs": {".": {}, "k:{\"ip\":\"%s\"}" % pod["status"]["podIP"]: {".": {}, "f:ip": {}}}, "f:startTime": {}}}
    pod["metadata"]["managedFields"] = [
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
         "time": "2026-01-15T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": spec_fields},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-01-15T10:00:04Z",
         "fieldsType": "FieldsV1", "fieldsV1": status_fields, "subresource": "status"}]
    pod["metadata"]["resourceVersion"] = str(1000 + i)
    return pod


def _configmap(i: int) -> dict:
    cm = workloads.settings_configmap(i)
    cm["metadata"]["managedFields"] = [{"manager": "kubectl-client-side-apply", "operation": "Update",
                                        "apiVersion": "v1", "time": "2026-01-15T10:00:00Z", "fieldsType": "FieldsV1",
                                        "fieldsV1": {"f:data": {".": {}, "f:app.properties": {}, "f:endpoints.yaml": {}},
                                                     "f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:component": {}}}}}]
    return cm


KINDS = {  # name -> factory of the JSON object kube-apiserver would have stored
    "ConfigMap": _configmap,
    "Pod": _managed_fields_pod,
    "RoleBinding": workloads.user_rolebinding,
    "Node": workloads.node,
}


def build_protoref(out_dir: Path) -> Path:
    exe = out_dir / "protoref"
    subprocess.run([shutil.which("go") or "go", "build", "-o", str(exe), "."], cwd=ROOT / "tests" / "go" / "protoref",
                   env=GO_ENV, check=True, timeout=900)
    return exe


def go_encode(exe: Path, objs: list[dict]) -> list[tuple[bytes, str]]:
    """(protobuf bytes, Go's encoding/json of the decoded object) of each object."""
    stdin = b"".join(orjson.dumps(o) + b"\n" for o in objs)
    r = subprocess.run([str(exe), "encode"], input=stdin, capture_output=True, check=True, timeout=600)
    return [(base64.b64decode(c["pb"]), c["json"]) for c in map(json.loads, r.stdout.splitlines())]


def fixtures(n: int, exe: Path | None = None) -> dict[str, list[tuple[bytes, str]]]:
    with tempfile.TemporaryDirectory() as d:
        exe = exe or build_protoref(Path(d))
        return {kind: go_encode(exe, [make(i) for i in range(n)]) for kind, make in KINDS.items()}


def general_decode_value(key: str, value: bytes) -> dict:
    """decode_value as it was before the compiled decoder: the envelope read twice, the general decoder."""
    av, kind, _ = protobuf._unwrap(value)
    name = protobuf.schema()["kinds"][f"{av}/{kind}"]
    av, kind, raw = protobuf._unwrap(value)
    obj = {"kind": kind, "apiVersion": av}
    obj.update(protobuf._Decoder().message(name, raw))
    return obj


def _best(fn, values: list[bytes], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        for v in values:
            fn("/registry/x", v)
        best = min(best, time.perf_counter() - t0)
    return best / len(values)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=2000, help="objects per kind")
    ap.add_argument("--runs", type=int, default=5, help="timed passes per kind (the best counts)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "protobuf_decode.json"))
    args = ap.parse_args(argv)

    print(f"encoding {args.objects} objects per kind with tests/go/protoref ...", file=sys.stderr)
    data = fixtures(args.objects)
    results = {}
    rows = [("kind", "pb bytes", "JSON bytes", "compiled µs/obj", "objects/s", "general µs/obj", "objects/s",
             "speed-up", "orjson µs/obj")]
    for kind, cases in data.items():
        for pb, want in cases:  # byte-identical to upstream first
            got = jsonenc.dumps(decode_value("/registry/x", pb)).decode()
            if got != want or jsonenc.dumps(general_decode_value("", pb)).decode() != want:
                print(f"{kind}: decoder differs from Go\n got: {got}\nwant: {want}", file=sys.stderr)
                return 1
        pbs = [pb for pb, _ in cases]
        jsons = [w.encode() for _, w in cases]
        per = _best(decode_value, pbs, args.runs)
        per_general = _best(general_decode_value, pbs, args.runs)
        per_json = _best(decode_value, jsons, args.runs)
        results[kind] = {"pb_bytes": sum(map(len, pbs)) / len(pbs), "json_bytes": sum(map(len, jsons)) / len(jsons),
                         "us_per_object": per * 1e6, "objects_per_s": 1 / per,
                         "general_us_per_object": per_general * 1e6, "speedup": per_general / per,
                         "orjson_us_per_object": per_json * 1e6}
        r = results[kind]
        rows.append((kind, f"{r['pb_bytes']:.0f}", f"{r['json_bytes']:.0f}", f"{r['us_per_object']:.1f}",
                     f"{r['objects_per_s']:,.0f}", f"{r['general_us_per_object']:.1f}", f"{1 / per_general:,.0f}",
                     f"{r['speedup']:.1f}x", f"{r['orjson_us_per_object']:.1f}"))
    if protobuf.FALLBACKS[0]:
        print(f"{protobuf.FALLBACKS[0]} objects fell back to the general decoder", file=sys.stderr)
        return 1
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"objects": args.objects, "runs": args.runs, "kinds": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
