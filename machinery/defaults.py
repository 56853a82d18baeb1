"""Defaulting of built-in kinds as kube-apiserver's decoding does it (sans-IO).

kube-apiserver decodes every built-in body into its Go struct, applies the scheme's defaulters
(k8s.io/kubernetes pkg/apis/<group>/v1/defaults.go and the generated declarative defaults), and encodes
the struct back. Three things follow for what a client reads back, reproduced here:

* `SetDefaults_*`: the values a client did not give (`spec.schedulerName: default-scheduler`,
  `imagePullPolicy`, a Deployment's `strategy`, ...): `pod_defaults`, `pod_spec_defaults`,
  `workload_defaults`.
* Go's encoding of the struct (`go_shape`): fields in struct order, fields without `omitempty` always
  present with their zero value (`resources: {}`, a ReplicaSet's `status.replicas: 0`), `omitempty` fields
  with an empty value dropped, maps with sorted keys. The struct layouts come from
  `machinery/k8s_proto_schema.json` (generated from k8s.io/api by tools/k8sproto). Fields the struct does
  not have are kept, after the known ones (kube-apiserver drops them; docs/differences.md).
* What the registry strategies and admission plugins set on create: a pod's status (`phase: Pending`,
  `qosClass`, the `SchedulingGated` condition), the DefaultTolerationSeconds tolerations, a Job's generated
  selector and labels, a DaemonSet's template generation annotation, the zero statuses.
"""
from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache
from typing import Any, Callable

from . import protobuf

Obj = dict[str, Any]

# --- Go's encoding of a decoded struct ------------------------------------------------------------


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    return protobuf.schema()


def message_of(api_version: str, kind: str) -> str | None:
    return _schema()["kinds"].get(f"{api_version}/{kind}")


_ZERO = {"string": "", "bool": False, "bytes": None, "float": 0, "double": 0}


def _scalar_zero(ty: str) -> Any:
    if ty in _ZERO:
        return _ZERO[ty]
    return 0 if ty.startswith(("int", "uint", "float")) else None


_SPECIAL_NAMES = {"time", "microtime", "quantity", "intorstring", "raw", "schemaorbool", "schemaorarray",
                  "schemaorstringarray"}


def _special(ty: Any) -> str | None:
    """The special (time, quantity, int-or-string, raw JSON, ...) a field type names, or None."""
    if isinstance(ty, str) and ty.startswith("msg:"):
        return _schema()["specials"].get(ty[4:])
    return ty if ty in _SPECIAL_NAMES else None


def _empty(value: Any) -> bool:
    """encoding/json's omitempty on a non-pointer field: false, 0, "", an empty slice or map."""
    if isinstance(value, (list, dict, str)):
        return not value
    return value is False or (type(value) in (int, float) and value == 0)


def _zero_field(flags: str, ty: Any) -> tuple[bool, Any]:
    """(present?, value) of a field the body did not give, as Go encodes the zero value."""
    if "p" in flags:
        return ("o" not in flags and "z" not in flags), None
    if isinstance(ty, list):
        return "o" not in flags, None
    sp = _special(ty)
    if sp is not None:
        if "z" in flags:
            return False, None
        return True, {"quantity": "0", "intorstring": 0}.get(sp)
    if isinstance(ty, str) and ty.startswith("msg:"):
        return "z" not in flags, shape_message(ty[4:], {})
    return "o" not in flags, _scalar_zero(ty)


def _copy_zero(v: Any) -> Any:
    return {k: _copy_zero(x) for k, x in v.items()} if isinstance(v, dict) else v


def _handler(ty: Any) -> Callable[[Any], Any] | None:
    """How a given value of type `ty` is re-encoded: None when it stays as it is (scalars, specials, lists of
    them); nested messages shaped, maps with sorted keys."""
    if isinstance(ty, list):
        inner = _handler(ty[-1])
        if ty[0] == "list":
            if inner is None:
                return None
            return lambda v: [inner(x) for x in v] if isinstance(v, list) else v
        if inner is None:
            return lambda v: {k: v[k] for k in sorted(v)} if isinstance(v, dict) else v
        return lambda v: {k: inner(v[k]) for k in sorted(v)} if isinstance(v, dict) else v
    if _special(ty) is None and isinstance(ty, str) and ty.startswith("msg:") and ty[4:] in _schema()["messages"]:
        sub = ty[4:]
        return lambda v: shape_message(sub, v) if isinstance(v, dict) else v
    return None


class _Plan:
    """A message's layout prepared for `shape_message`: each field's rank in Go's order (embedded structs'
    fields in place), whether omitempty applies, how a value is re-encoded, and the fields Go writes even
    when the body did not give them (with their zero values)."""
    __slots__ = ("rank", "always")

    def __init__(self, msg: str):
        self.rank: dict[str, tuple[int, bool, Any]] = {}
        self.always: list[tuple[int, str, Any]] = []
        self._add(msg)

    def _add(self, msg: str) -> None:
        for _num, name, flags, ty in _schema()["messages"].get(msg, ()):
            if "e" in flags:
                self._add(ty[4:])
                continue
            i = len(self.rank)
            self.rank[name] = (i, "o" in flags and "p" not in flags, _handler(ty))
            present, zero = _zero_field(flags, ty)
            if present:
                self.always.append((i, name, zero))


@lru_cache(maxsize=None)
def _plan(msg: str) -> _Plan | None:
    return _Plan(msg) if msg in _schema()["messages"] else None


def shape_message(msg: str, obj: Obj) -> Obj:
    """`obj` as Go encodes the decoded struct `msg` (see the module docstring)."""
    plan = _plan(msg)
    if plan is None:
        return obj
    rank = plan.rank
    known: list[tuple[int, str, Any]] = []
    unknown: list[tuple[str, Any]] = []
    for k, v in obj.items():
        info = rank.get(k)
        if info is None:
            unknown.append((k, v))
        elif v is not None and not (info[1] and _empty(v)):
            known.append((info[0], k, v if info[2] is None else info[2](v)))
    if plan.always:
        given = {k for _, k, _ in known}
        known.extend((i, k, _copy_zero(z)) for i, k, z in plan.always if k not in given)
    known.sort(key=lambda x: x[0])
    out: Obj = {}
    for k, v in unknown:  # an embedded object's TypeMeta (a StatefulSet's claim templates) comes first
        if k in ("kind", "apiVersion"):
            out[k] = v
    for _, k, v in known:
        out[k] = v
    for k, v in unknown:  # fields the Go struct does not have: kept (kube-apiserver drops them)
        if k not in out:
            out[k] = v
    return out


@lru_cache(maxsize=None)
def _field_message(msg: str, name: str) -> str | None:
    for _num, fname, _flags, ty in _schema()["messages"].get(msg, ()):
        if fname == name and isinstance(ty, str) and ty.startswith("msg:"):
            return ty[4:]
    return None


def go_shape_field(api_version: str, kind: str, obj: Obj, name: str) -> Obj:
    """`go_shape` of one top-level field only (a status update: the rest is the stored, shaped object)."""
    msg = message_of(api_version, kind)
    sub = _field_message(msg, name) if msg else None
    if sub is not None and isinstance(obj.get(name), dict):
        obj[name] = shape_message(sub, obj[name])
    return obj


def go_shape(api_version: str, kind: str, obj: Obj) -> Obj:
    """A whole built-in object as kube-apiserver encodes it (kind and apiVersion first)."""
    msg = message_of(api_version, kind)
    if msg is None:
        return obj
    body = shape_message(msg, {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")})
    return {"kind": obj.get("kind", kind), "apiVersion": obj.get("apiVersion", api_version), **body}


# --- SetDefaults_* (k8s.io/kubernetes pkg/apis/core/v1/defaults.go and the declarative defaults) ----------

_DOMAIN = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*" \
          r"(?::[0-9]+)?|\[[a-fA-F0-9:]+\](?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_REFERENCE = re.compile(rf"(?:(?:{_DOMAIN})/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
                        r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?P<digest>@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*"
                        r":[0-9a-fA-F]{32,})?")


def image_tag(image: Any) -> str:
    """The tag parsers.ParseImageName finds: `latest` when the reference has neither tag nor digest, ""
    when it is not a valid reference."""
    if not isinstance(image, str):
        return ""
    m = _REFERENCE.fullmatch(image)
    if m is None:
        return ""
    if not m.group("tag") and not m.group("digest"):
        return "latest"
    return m.group("tag") or ""


def _probe_handler(h: Any) -> None:
    if isinstance(h, dict) and isinstance(h.get("httpGet"), dict):
        g = h["httpGet"]
        if not g.get("path"):
            g["path"] = "/"
        if not g.get("scheme"):
            g["scheme"] = "HTTP"


def _probe(p: Any) -> None:
    if not isinstance(p, dict):
        return
    _probe_handler(p)
    for k, v in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3)):
        if not p.get(k):
            p[k] = v


def _field_ref(holder: Any) -> None:
    if isinstance(holder, dict) and isinstance(holder.get("fieldRef"), dict) and not holder["fieldRef"].get("apiVersion"):
        holder["fieldRef"]["apiVersion"] = "v1"


def container_defaults(c: Any) -> None:
    """SetDefaults_Container (also of init and ephemeral containers) and what it holds."""
    if not isinstance(c, dict):
        return
    if not c.get("imagePullPolicy"):
        c["imagePullPolicy"] = "Always" if image_tag(c.get("image")) == "latest" else "IfNotPresent"
    if not c.get("terminationMessagePath"):
        c["terminationMessagePath"] = "/dev/termination-log"
    if not c.get("terminationMessagePolicy"):
        c["terminationMessagePolicy"] = "File"
    for port in c.get("ports") or []:
        if isinstance(port, dict) and not port.get("protocol"):
            port["protocol"] = "TCP"
    for env in c.get("env") or []:
        if isinstance(env, dict):
            _field_ref(env.get("valueFrom"))
    for k in ("livenessProbe", "readinessProbe", "startupProbe"):
        _probe(c.get(k))
    lifecycle = c.get("lifecycle")
    if isinstance(lifecycle, dict):
        for k in ("postStart", "preStop"):
            _probe_handler(lifecycle.get(k))


_VOLUME_SOURCES_DEFAULT_MODE = ("secret", "configMap", "downwardAPI", "projected")


def _volume(v: Any) -> None:
    if not isinstance(v, dict):
        return
    if not any(isinstance(val, dict) for k, val in v.items() if k != "name"):
        v["emptyDir"] = {}  # SetDefaults_Volume: no source is an emptyDir
    for k in _VOLUME_SOURCES_DEFAULT_MODE:
        src = v.get(k)
        if isinstance(src, dict) and src.get("defaultMode") is None:
            src["defaultMode"] = 420
    host = v.get("hostPath")
    if isinstance(host, dict) and host.get("type") is None:
        host["type"] = ""
    for item in (v.get("downwardAPI") or {}).get("items") or [] if isinstance(v.get("downwardAPI"), dict) else []:
        _field_ref(item)
    projected = v.get("projected")
    if isinstance(projected, dict):
        for src in projected.get("sources") or []:
            if not isinstance(src, dict):
                continue
            token = src.get("serviceAccountToken")
            if isinstance(token, dict) and token.get("expirationSeconds") is None:
                token["expirationSeconds"] = 3600
            if isinstance(src.get("downwardAPI"), dict):
                for item in src["downwardAPI"].get("items") or []:
                    _field_ref(item)


def pod_spec_defaults(spec: Any) -> None:
    """SetDefaults_PodSpec and the defaults of what a PodSpec holds (pods and every pod template)."""
    if not isinstance(spec, dict):
        return
    # v1 conversion: serviceAccount is the deprecated twin of serviceAccountName (read when the latter is
    # empty, written as its copy)
    account = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if account:
        spec["serviceAccountName"] = spec["serviceAccount"] = account
    else:
        spec.pop("serviceAccount", None)
    if not spec.get("dnsPolicy"):
        spec["dnsPolicy"] = "ClusterFirst"
    if not spec.get("restartPolicy"):
        spec["restartPolicy"] = "Always"
    if spec.get("securityContext") is None:
        spec["securityContext"] = {}
    if spec.get("terminationGracePeriodSeconds") is None:
        spec["terminationGracePeriodSeconds"] = 30
    if not spec.get("schedulerName"):
        spec["schedulerName"] = "default-scheduler"
    for f in ("containers", "initContainers", "ephemeralContainers"):
        for c in spec.get(f) or []:
            container_defaults(c)
    for v in spec.get("volumes") or []:
        _volume(v)


def pod_defaults(pod: Obj) -> None:
    """SetDefaults_Pod + SetDefaults_PodSpec: requests from limits, enableServiceLinks, host ports."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    for f in ("containers", "initContainers"):
        for c in spec.get(f) or []:
            if not isinstance(c, dict) or not isinstance(c.get("resources"), dict):
                continue
            res = c["resources"]
            if isinstance(res.get("limits"), dict):
                req = res.get("requests") if isinstance(res.get("requests"), dict) else {}
                res["requests"] = {**{k: v for k, v in res["limits"].items() if k not in req}, **req}
    if spec.get("enableServiceLinks") is None:
        spec["enableServiceLinks"] = True
    if spec.get("hostNetwork") is True:
        for f in ("containers", "initContainers"):
            for c in spec.get(f) or []:
                for port in (c.get("ports") or []) if isinstance(c, dict) else []:
                    if isinstance(port, dict) and not port.get("hostPort"):
                        port["hostPort"] = port.get("containerPort")
    pod_spec_defaults(spec)


def pod_status_conversion(pod: Obj) -> None:
    """The v1 conversion of a PodStatus: podIP is authoritative, podIPs starts with it (and podIP is
    podIPs[0] on the way out)."""
    status = pod.get("status")
    if not isinstance(status, dict):
        return
    ip, ips = status.get("podIP"), status.get("podIPs")
    if ip and (not isinstance(ips, list) or not ips or not isinstance(ips[0], dict) or ips[0].get("ip") != ip):
        status["podIPs"] = [{"ip": ip}]
    elif not ip and isinstance(ips, list) and ips and isinstance(ips[0], dict) and ips[0].get("ip"):
        status["podIP"] = ips[0]["ip"]


def _template(holder: Any, key: str = "template") -> None:
    if isinstance(holder, dict) and isinstance(holder.get(key), dict):
        pod_spec_defaults(holder[key].get("spec"))


def _int_default(spec: Obj, key: str, value: Any) -> None:
    if spec.get(key) is None:
        spec[key] = value


def _pvc_template(t: Any) -> None:
    """SetDefaults_PersistentVolumeClaim(Spec) on a StatefulSet's claim templates (which carry their TypeMeta)."""
    if not isinstance(t, dict):
        return
    t.setdefault("kind", "PersistentVolumeClaim")
    t.setdefault("apiVersion", "v1")
    if isinstance(t.get("spec"), dict) and t["spec"].get("volumeMode") is None:
        t["spec"]["volumeMode"] = "Filesystem"
    status = t.setdefault("status", {})
    if isinstance(status, dict) and not status.get("phase"):
        status["phase"] = "Pending"


def _rolling_update(spec: Obj, key: str, max_unavailable: Any, max_surge: Any) -> None:
    """A Deployment's strategy / a DaemonSet's updateStrategy: RollingUpdate with its maxUnavailable and
    maxSurge unless another type is given."""
    strategy = spec.setdefault(key, {})
    if isinstance(strategy, dict):
        if not strategy.get("type"):
            strategy["type"] = "RollingUpdate"
        if strategy["type"] == "RollingUpdate":
            ru = strategy.setdefault("rollingUpdate", {})
            if isinstance(ru, dict):
                _int_default(ru, "maxUnavailable", max_unavailable)
                _int_default(ru, "maxSurge", max_surge)


def _deployment(spec: Obj) -> None:
    _int_default(spec, "replicas", 1)
    _rolling_update(spec, "strategy", "25%", "25%")
    _int_default(spec, "revisionHistoryLimit", 10)
    _int_default(spec, "progressDeadlineSeconds", 600)


def _daemonset(spec: Obj) -> None:
    _rolling_update(spec, "updateStrategy", 1, 0)
    _int_default(spec, "revisionHistoryLimit", 10)


def _statefulset(spec: Obj) -> None:
    if not spec.get("podManagementPolicy"):
        spec["podManagementPolicy"] = "OrderedReady"
    strategy = spec.setdefault("updateStrategy", {})
    if isinstance(strategy, dict):
        if not strategy.get("type"):
            strategy["type"] = "RollingUpdate"
            strategy.setdefault("rollingUpdate", {})
        ru = strategy.get("rollingUpdate")
        if strategy["type"] == "RollingUpdate" and isinstance(ru, dict):
            _int_default(ru, "partition", 0)
            _int_default(ru, "maxUnavailable", 1)  # MaxUnavailableStatefulSet (on in 1.37)
    policy = spec.setdefault("persistentVolumeClaimRetentionPolicy", {})
    if isinstance(policy, dict):
        for k in ("whenDeleted", "whenScaled"):
            if not policy.get(k):
                policy[k] = "Retain"
    _int_default(spec, "replicas", 1)
    _int_default(spec, "revisionHistoryLimit", 10)
    for t in spec.get("volumeClaimTemplates") or []:
        _pvc_template(t)


def _job(job: Obj, spec: Obj) -> None:
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    _int_default(spec, "parallelism", 1)
    _int_default(spec, "backoffLimit", 6)
    if not spec.get("completionMode"):
        spec["completionMode"] = "NonIndexed"
    _int_default(spec, "suspend", False)
    if not spec.get("podReplacementPolicy"):
        spec["podReplacementPolicy"] = "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    if spec.get("manualSelector") is None:
        spec["manualSelector"] = False


def _cronjob(spec: Obj) -> None:
    if not spec.get("concurrencyPolicy"):
        spec["concurrencyPolicy"] = "Allow"
    _int_default(spec, "suspend", False)
    _int_default(spec, "successfulJobsHistoryLimit", 3)
    _int_default(spec, "failedJobsHistoryLimit", 1)
    jt = spec.get("jobTemplate")
    if isinstance(jt, dict):
        _template(jt.get("spec"))


def _replication_controller(rc: Obj, spec: Obj) -> None:
    tmpl = spec.get("template")
    labels = ((tmpl.get("metadata") or {}).get("labels") if isinstance(tmpl, dict) else None)
    if isinstance(labels, dict):
        if not spec.get("selector"):
            spec["selector"] = dict(labels)
        md = rc.setdefault("metadata", {})
        if not md.get("labels"):
            md["labels"] = dict(labels)
    _int_default(spec, "replicas", 1)


def _network_policy(spec: Obj) -> None:
    for direction, peers in (("ingress", "from"), ("egress", "to")):
        for rule in spec.get(direction) or []:
            for port in (rule.get("ports") or []) if isinstance(rule, dict) else []:
                if isinstance(port, dict) and port.get("protocol") is None:
                    port["protocol"] = "TCP"
    if not spec.get("policyTypes"):
        spec["policyTypes"] = ["Ingress"] + (["Egress"] if spec.get("egress") else [])


def _hpa(spec: Obj) -> None:
    """SetDefaults_HorizontalPodAutoscaler (autoscaling/v2; behavior rules are not filled in here)."""
    _int_default(spec, "minReplicas", 1)
    if not spec.get("metrics"):
        spec["metrics"] = [{"type": "Resource", "resource": {
            "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]


def _csi_driver(spec: Obj) -> None:
    for k, v in (("attachRequired", True), ("podInfoOnMount", False), ("storageCapacity", False),
                 ("fsGroupPolicy", "ReadWriteOnceWithFSType"), ("requiresRepublish", False), ("seLinuxMount", False),
                 ("preventPodSchedulingIfMissing", False)):
        _int_default(spec, k, v)
    if not spec.get("volumeLifecycleModes"):
        spec["volumeLifecycleModes"] = ["Persistent"]


def _top_level(obj: Obj, values: tuple[tuple[str, Any], ...]) -> None:
    for k, v in values:
        _int_default(obj, k, v)


def _endpoint_slice(obj: Obj) -> None:
    for port in obj.get("ports") or []:
        if isinstance(port, dict):
            _int_default(port, "name", "")
            _int_default(port, "protocol", "TCP")


def _endpoints(obj: Obj) -> None:
    for subset in obj.get("subsets") or []:
        for port in (subset.get("ports") or []) if isinstance(subset, dict) else []:
            if isinstance(port, dict) and not port.get("protocol"):
                port["protocol"] = "TCP"


def _limit_range(spec: Obj) -> None:
    """SetDefaults_LimitRangeItem: a Container limit's default from max, its default request from the
    default, then from min."""
    for item in spec.get("limits") or []:
        if not isinstance(item, dict) or item.get("type") != "Container":
            continue
        default = item.setdefault("default", {})
        request = item.setdefault("defaultRequest", {})
        if not isinstance(default, dict) or not isinstance(request, dict):
            continue
        for src, dst in ((item.get("max"), default), (default, request), (item.get("min"), request)):
            for k, v in (src or {}).items():
                dst.setdefault(k, v)


def _pvc(obj: Obj) -> None:
    """SetDefaults_PersistentVolumeClaim(Spec)."""
    if isinstance(obj.get("spec"), dict):
        _int_default(obj["spec"], "volumeMode", "Filesystem")
    status = obj.setdefault("status", {})
    if isinstance(status, dict) and not status.get("phase"):
        status["phase"] = "Pending"


# Defaulters of kinds without a spec, or whose spec needs the whole object.
_OBJECTS = {
    ("scheduling.k8s.io", "priorityclasses"): lambda o: _top_level(o, (("preemptionPolicy", "PreemptLowerPriority"),)),
    ("storage.k8s.io", "storageclasses"): lambda o: _top_level(o, (("reclaimPolicy", "Delete"),
                                                                   ("volumeBindingMode", "Immediate"))),
    ("discovery.k8s.io", "endpointslices"): _endpoint_slice,
    ("", "endpoints"): _endpoints,
    ("", "persistentvolumeclaims"): _pvc,
    ("", "persistentvolumes"): lambda o: _pv(o),
}


def _pv(obj: Obj) -> None:
    """SetDefaults_PersistentVolume."""
    if isinstance(obj.get("spec"), dict):
        _int_default(obj["spec"], "persistentVolumeReclaimPolicy", "Retain")
        _int_default(obj["spec"], "volumeMode", "Filesystem")
        if isinstance(obj["spec"].get("hostPath"), dict):
            _int_default(obj["spec"]["hostPath"], "type", "")
    status = obj.setdefault("status", {})
    if isinstance(status, dict) and not status.get("phase"):
        status["phase"] = "Pending"


def _ingress_class(spec: Obj) -> None:
    params = spec.get("parameters")
    if isinstance(params, dict) and params.get("scope") is None:
        params["scope"] = "Cluster"


_WORKLOADS = {("networking.k8s.io", "networkpolicies"): _network_policy,
              ("networking.k8s.io", "ingressclasses"): _ingress_class,
              ("autoscaling", "horizontalpodautoscalers"): _hpa, ("", "limitranges"): _limit_range, ("storage.k8s.io", "csidrivers"): _csi_driver,
              ("apps", "deployments"): _deployment, ("apps", "daemonsets"): _daemonset,
              ("apps", "statefulsets"): _statefulset, ("apps", "replicasets"): lambda s: _int_default(s, "replicas", 1),
              ("batch", "cronjobs"): _cronjob}


def defaults(group: str, plural: str, obj: Obj) -> None:
    """The scheme's defaulters for one decoded object (create and update alike)."""
    if (group, plural) == ("", "pods"):
        pod_defaults(obj)
        return
    if (group, plural) == ("", "podtemplates"):
        _template(obj)
        return
    if (group, plural) in _OBJECTS:
        _OBJECTS[(group, plural)](obj)
        return
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if (group, plural) == ("batch", "jobs"):
        _job(obj, spec)
    elif (group, plural) == ("", "replicationcontrollers"):
        _replication_controller(obj, spec)
    elif (group, plural) in _WORKLOADS:
        _WORKLOADS[(group, plural)](spec)
    else:
        return
    _template(spec)


# --- what the strategies and admission plugins set on create ------------------------------------------------

# Kinds whose registry strategy sets metadata.generation (1 on create, +1 on a spec change): the strategies of
# k8s.io/kubernetes v1.37.2 pkg/registry that set `Generation = 1` in PrepareForCreate.
GENERATION_KINDS = {
    ("", "pods"), ("", "podtemplates"), ("", "replicationcontrollers"),
    ("apps", "deployments"), ("apps", "replicasets"), ("apps", "statefulsets"), ("apps", "daemonsets"),
    ("batch", "jobs"), ("batch", "cronjobs"), ("autoscaling", "horizontalpodautoscalers"),
    ("policy", "poddisruptionbudgets"), ("scheduling.k8s.io", "priorityclasses"),
    ("discovery.k8s.io", "endpointslices"),
    ("networking.k8s.io", "ingresses"), ("networking.k8s.io", "ingressclasses"), ("networking.k8s.io", "networkpolicies"),
    ("flowcontrol.apiserver.k8s.io", "flowschemas"), ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations"),
    ("resource.k8s.io", "deviceclasses"), ("resource.k8s.io", "devicetaintrules"), ("resource.k8s.io", "resourceslices"),
    *(("admissionregistration.k8s.io", p) for p in (
        "mutatingadmissionpolicies", "mutatingadmissionpolicybindings", "mutatingwebhookconfigurations",
        "validatingadmissionpolicies", "validatingadmissionpolicybindings", "validatingwebhookconfigurations")),
}

# PrepareForCreate resets the status of these kinds (Go's zero status, encoded by go_shape).
_STATUS_RESET = {
    ("", "replicationcontrollers"), ("", "resourcequotas"),
    ("apps", "deployments"), ("apps", "replicasets"), ("apps", "statefulsets"), ("apps", "daemonsets"),
    ("batch", "jobs"), ("batch", "cronjobs"), ("autoscaling", "horizontalpodautoscalers"),
    ("policy", "poddisruptionbudgets"), ("networking.k8s.io", "ingresses"), ("networking.k8s.io", "servicecidrs"),
    ("flowcontrol.apiserver.k8s.io", "flowschemas"), ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations"),
    ("resource.k8s.io", "resourceclaims"), ("resource.k8s.io", "devicetaintrules"),
    ("storage.k8s.io", "volumeattachments"), ("storage.k8s.io", "csinodes"),
    ("certificates.k8s.io", "podcertificaterequests"), ("storagemigration.k8s.io", "storageversionmigrations"),
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"),
}


def prepare_create(group: str, plural: str, obj: Obj) -> None:
    """Strategy PrepareForCreate and the default admission plugins, after `defaults` and uid assignment."""
    md = obj.setdefault("metadata", {})
    if (group, plural) == ("", "pods"):
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        default_tolerations(spec)
        status: Obj = {"phase": "Pending"}
        if spec.get("schedulingGates"):
            status["conditions"] = [{"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                                     "lastTransitionTime": md.get("creationTimestamp"), "reason": "SchedulingGated",
                                     "message": "Scheduling is blocked due to non-empty scheduling gates"}]
        status["qosClass"] = qos_class(spec)
        obj["status"] = status
        return
    if (group, plural) in _STATUS_RESET:
        obj["status"] = {}
    if (group, plural) == ("", "persistentvolumes"):
        obj["status"] = {"phase": "Pending", "lastPhaseTransitionTime": md.get("creationTimestamp")}
        _add_finalizer(md, "kubernetes.io/pv-protection")  # StorageObjectInUseProtection admission
    if (group, plural) == ("", "persistentvolumeclaims"):
        obj["status"] = {"phase": "Pending"}
        _add_finalizer(md, "kubernetes.io/pvc-protection")  # StorageObjectInUseProtection admission
    if (group, plural) == ("apps", "daemonsets"):
        md["annotations"] = {**(md.get("annotations") or {}), "deprecated.daemonset.template.generation": "1"}
    elif (group, plural) == ("batch", "jobs"):
        _job_selector(obj)


def _add_finalizer(md: Obj, name: str) -> None:
    finalizers = md.get("finalizers") if isinstance(md.get("finalizers"), list) else []
    if name not in finalizers:
        md["finalizers"] = [*finalizers, name]


def _job_selector(job: Obj) -> None:
    """Job generateSelector (manualSelector unset or false): the controller-uid selector and template labels;
    the Job's own labels are the template's when it has none."""
    spec = job.get("spec")
    md = job["metadata"]
    if not isinstance(spec, dict) or spec.get("manualSelector") is True:
        return
    uid, name = md.get("uid", ""), md.get("name", "")
    tmpl = spec.setdefault("template", {})
    if not isinstance(tmpl, dict):
        return
    tmd = tmpl.setdefault("metadata", {})
    if isinstance(tmd, dict):
        tmd["labels"] = {**(tmd.get("labels") or {}), "batch.kubernetes.io/controller-uid": uid,
                         "batch.kubernetes.io/job-name": name, "controller-uid": uid, "job-name": name}
        if not md.get("labels"):
            md["labels"] = dict(tmd["labels"])
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}


def template_changed(old: Obj, new: Obj) -> bool:
    return ((old.get("spec") or {}).get("template")) != ((new.get("spec") or {}).get("template"))


def daemonset_update(old: Obj, new: Obj) -> None:
    """daemonSetStrategy.PrepareForUpdate: a changed template bumps the template generation annotation."""
    omd, nmd = old.get("metadata") or {}, new.setdefault("metadata", {})
    gen = (omd.get("annotations") or {}).get("deprecated.daemonset.template.generation")
    if gen is None:
        return
    if template_changed(old, new):
        try:
            gen = str(int(gen) + 1)
        except ValueError:
            return
    nmd["annotations"] = {**(nmd.get("annotations") or {}), "deprecated.daemonset.template.generation": gen}


_NOT_READY = "node.kubernetes.io/not-ready"
_UNREACHABLE = "node.kubernetes.io/unreachable"


def default_tolerations(spec: Obj) -> None:
    """The DefaultTolerationSeconds admission plugin: 300 s NoExecute tolerations of the not-ready and
    unreachable taints unless the pod tolerates them already."""
    tolerations = spec.get("tolerations") if isinstance(spec.get("tolerations"), list) else []

    def tolerates(key: str) -> bool:
        return any(isinstance(t, dict) and t.get("key") in (key, "", None)
                   and t.get("effect") in ("NoExecute", "", None) for t in tolerations)
    add = [{"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
           for k in (_NOT_READY, _UNREACHABLE) if not tolerates(k)]
    if add:
        spec["tolerations"] = list(tolerations) + add


# --- quantities and the QoS class ----------------------------------------------------------------------

_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
           "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1,
           "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?")


def quantity(value: Any) -> Fraction | None:
    """resource.ParseQuantity's value, exactly; None if it does not parse."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Fraction(value)
    if not isinstance(value, str):
        return None
    m = _QUANTITY.fullmatch(value.strip())
    if m is None:
        return None
    num = Fraction(m.group(1))
    suffix = m.group(2) or ""
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return num * Fraction(10) ** int(suffix[1:])
    return num * _SUFFIX[suffix]


_QOS_RESOURCES = ("cpu", "memory")


def qos_class(spec: Obj) -> str:
    """qos.GetPodQOS: BestEffort, Guaranteed or Burstable, from cpu and memory requests and limits
    (the pod-level resources when the spec has them)."""
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True

    def add(total: dict, name: str, q: Any) -> bool:
        v = quantity(q)
        if name in _QOS_RESOURCES and v is not None and v > 0:
            total[name] = total.get(name, 0) + v
            return True
        return False
    pod_res = spec.get("resources") if isinstance(spec.get("resources"), dict) else None
    if pod_res and (pod_res.get("requests") or pod_res.get("limits")):
        groups = [pod_res]
    else:
        groups = [c.get("resources") or {} for f in ("containers", "initContainers")
                  for c in spec.get(f) or [] if isinstance(c, dict)]
    for res in groups:
        if not isinstance(res, dict):
            continue
        for name, q in (res.get("requests") or {}).items():
            add(requests, name, q)
        found = {name for name, q in (res.get("limits") or {}).items() if add(limits, name, q)}
        if not set(_QOS_RESOURCES) <= found:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and all(limits.get(n) == v for n, v in requests.items()) and len(requests) == len(limits):
        return "Guaranteed"
    return "Burstable"


# --- pods/binding ----------------------------------------------------------------------------------------

def bind(pod: Obj, node: str, annotations: Any, now: str) -> Obj:
    """BindingREST.setPodHostAndAnnotations on a pod that may be bound: spec.nodeName, the binding's
    annotations merged in, and the PodScheduled condition set to True (podutil.UpdatePodCondition: a new
    condition, or the old one replaced, keeping its transition time when its status was True already)."""
    pod["spec"] = {**(pod.get("spec") or {}), "nodeName": node}
    md = pod.setdefault("metadata", {})
    if isinstance(annotations, dict) and annotations:
        md["annotations"] = {**(md.get("annotations") or {}), **annotations}
    update_pod_condition(pod, {"type": "PodScheduled", "status": "True"}, now)
    return pod


def update_pod_condition(pod: Obj, condition: Obj, now: str) -> None:
    """podutil.UpdatePodCondition: the condition added, or the one of its type replaced (its transition time
    kept when the status does not change)."""
    status = pod.setdefault("status", {})
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    cond: Obj = {"type": condition["type"], "status": condition["status"], "lastProbeTime": None,
                 "lastTransitionTime": now, **{k: condition[k] for k in ("reason", "message") if k in condition}}
    for i, c in enumerate(conditions):
        if c.get("type") == cond["type"]:
            if c.get("status") == cond["status"]:
                cond["lastTransitionTime"] = c.get("lastTransitionTime")
            conditions[i] = cond
            break
    else:
        conditions.append(cond)
    status["conditions"] = conditions
