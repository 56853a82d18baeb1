"""`pods/eviction` (create a policy/v1 Eviction), as upstream's EvictionREST
(pkg/registry/core/pod/storage/eviction.go), what `kubectl drain` uses:

* a pod that is Pending, Succeeded, Failed or being deleted is deleted at once;
* otherwise the PodDisruptionBudgets of its namespace whose selector matches it are consulted: none, the pod
  is deleted (with its resourceVersion as precondition); more than one, a 500 Status; one, the budget must
  allow a disruption (observed generation current, disruptionsAllowed > 0: else 429 with upstream's cause),
  which is taken (status.disruptionsAllowed - 1, the pod in status.disruptedPods, the DisruptionAllowed
  condition when it reaches 0) before the pod is deleted. An unready pod passes when the budget's
  unhealthyPodEvictionPolicy is AlwaysAllow, or its healthy pods suffice;
* before the delete the pod gets the DisruptionTarget condition (reason EvictionByEvictionAPI); the delete is
  the pod's own (graceful, DeleteOptions from the Eviction). The answer is a Success Status (201).
"""
from __future__ import annotations

from apiserver.httpstack import web

from machinery import defaults, errors, jsonenc, objects
from machinery.resources import Resource
from storage import errors as serr
from storage.interface import ListRequest

from ..status import map_storage_error
from .common import Context, Obj, RequestScope, decode_body, dry_run, json_response
from .write import delete_one

EVICTION = Resource(group="policy", version="v1", kind="Eviction", plural="evictions", singular="eviction",
                    namespaced=True, verbs=["create"], stored=False)
_BUDGET = "DisruptionBudget"
_TOO_MANY = "Cannot evict pod as it would violate the pod's disruption budget."


def selector_matches(sel: object, labels: dict) -> bool:
    """metav1.LabelSelectorAsSelector(sel).Matches(labels); a nil or invalid selector matches nothing."""
    if not isinstance(sel, dict):
        return False
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or []:
        if not isinstance(e, dict):
            return False
        k, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(k) not in values or op == "NotIn" and k in labels and labels[k] in values \
                or op == "Exists" and k not in labels or op == "DoesNotExist" and k in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def _pod_ready(pod: Obj) -> bool:
    return any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _too_many(message: str, retry_after: int) -> errors.StatusError:
    details: dict = {"causes": [{"reason": _BUDGET, "message": message}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return errors.StatusError(429, "TooManyRequests", _TOO_MANY, details)


def _take_disruption(pdb: Obj, pod_name: str, dry: bool) -> Obj | None:
    """checkAndDecrement: the budget with one disruption taken (None on a dry run), or a 429/403."""
    name = pdb["metadata"].get("name", "")
    status = dict(pdb.get("status") or {})
    if int(status.get("observedGeneration") or 0) < int(pdb["metadata"].get("generation") or 0):
        raise _too_many(f"The disruption budget {name} is still being processed by the server.", 10)
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        raise errors.StatusError(403, "Forbidden", f'poddisruptionbudget.policy "{name}" is forbidden: pdb '
                                 "disruptions allowed is negative", {"name": name, "group": "policy",
                                                                     "kind": "poddisruptionbudget", "causes": [
                                     {"reason": _BUDGET, "message": f"The disruption budget {name} does not allow "
                                      "evicting pods currently: pdb disruptions allowed is negative"}]})
    if allowed == 0:
        current, desired = int(status.get("currentHealthy") or 0), int(status.get("desiredHealthy") or 0)
        if current <= desired:
            msg = f"The disruption budget {name} needs {desired} healthy pods and has {current} currently"
        else:
            msg = f"The disruption budget {name} does not allow evicting pods currently"
        raise _too_many(msg, 0)
    status["disruptionsAllowed"] = allowed - 1
    if allowed - 1 == 0:
        conds = [dict(c) for c in status.get("conditions") or [] if isinstance(c, dict)]
        cond = next((c for c in conds if c.get("type") == "DisruptionAllowed"), None)
        if cond is None:
            cond = {"type": "DisruptionAllowed", "lastTransitionTime": objects.now_rfc3339()}
            conds.append(cond)
        elif cond.get("status") != "False":
            cond["lastTransitionTime"] = objects.now_rfc3339()
        cond.update(status="False", reason="InsufficientPods", observedGeneration=status.get("observedGeneration", 0))
        cond.setdefault("message", "")
        status["conditions"] = conds
    if dry:
        return None
    status["disruptedPods"] = {**(status.get("disruptedPods") or {}), pod_name: objects.now_rfc3339()}
    return {**pdb, "status": status}


async def create(ctx: Context, request: web.Request, scope: RequestScope) -> web.Response:
    eviction = await decode_body(request, EVICTION)
    md = eviction.get("metadata") if isinstance(eviction.get("metadata"), dict) else {}
    if md.get("namespace") and md["namespace"] != scope.namespace:
        raise errors.bad_request("the namespace of the provided object does not match the namespace sent on "
                                 "the request")
    if (md.get("name") or "") != scope.name:
        raise errors.bad_request("name in URL does not match name in Eviction object")
    opts = eviction.get("deleteOptions") if isinstance(eviction.get("deleteOptions"), dict) else {}
    dry = dry_run(request) or bool(opts.get("dryRun"))
    pre = opts.get("preconditions") if isinstance(opts.get("preconditions"), dict) else {}
    grace = opts.get("gracePeriodSeconds")
    pods = scope.resource
    key = ctx.key(scope)
    store = ctx.storage(pods)
    try:
        pod = await store.get(key)
    except serr.StorageError as e:
        raise map_storage_error(e, pods, scope.name or "") from None
    pmd = pod["metadata"]
    phase = (pod.get("status") or {}).get("phase")
    rv = pre.get("resourceVersion")
    if phase in ("Succeeded", "Failed", "Pending") or pmd.get("deletionTimestamp"):
        if phase == "Pending" and not pmd.get("deletionTimestamp") and not rv:
            rv = pmd.get("resourceVersion")  # not racing the pod becoming ready (shouldEnforceResourceVersion)
    elif await _budget(ctx, pod, dry) and not rv:
        rv = pmd.get("resourceVersion")  # an unready pod let through: it must not have become ready since
    await _condition_and_delete(ctx, request, pods, scope, pod, pre.get("uid"), rv, dry, grace)
    return json_response(jsonenc.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                        "code": 201}) + b"\n", 201)


async def _budget(ctx: Context, pod: Obj, dry: bool) -> bool:
    """The matching budget's check: a disruption taken, or a 429 (500 for more than one budget); True when
    the pod is let through unready without taking one."""
    res = ctx.registry.lookup("policy", "v1", "poddisruptionbudgets")
    if res is None:
        return False
    ns = pod["metadata"].get("namespace")
    try:
        page = await ctx.storage(res).store.get_list(res.prefix(ctx.etcd_prefix, ns), ListRequest(namespace=ns))
    except serr.StorageError as e:
        raise map_storage_error(e, res) from None
    labels = pod["metadata"].get("labels") or {}
    matching = [p for p in page.items() if selector_matches((p.get("spec") or {}).get("selector"), labels)]
    if len(matching) > 1:
        raise errors.StatusError(500, "", "This pod has more than one PodDisruptionBudget, which the eviction "
                                          "subresource does not support.")
    if not matching:
        return False
    pdb = matching[0]
    spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
    if not _pod_ready(pod) and (spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow" or (
            int(status.get("currentHealthy") or 0) >= int(status.get("desiredHealthy") or 0) > 0)):
        return True
    new = _take_disruption(pdb, pod["metadata"]["name"], dry)
    if new is not None:
        await _update_budget(ctx, res, pdb, new)
    return False


async def _update_budget(ctx: Context, res: Resource, pdb: Obj, new: Obj) -> None:
    key = res.key(ctx.etcd_prefix, pdb["metadata"].get("namespace"), pdb["metadata"]["name"])
    body = objects.prepare_update(res, jsonenc.loads(jsonenc.dumps(new)), pdb, "status")
    try:
        out, _ = await ctx.storage(res).try_update(key, body, int(pdb["metadata"]["resourceVersion"]))
    except serr.StorageError as e:
        raise map_storage_error(e, res, pdb["metadata"]["name"]) from None
    if out is None:  # changed meanwhile: the client retries (upstream retries, then answers the same 429)
        raise _too_many(f"The disruption budget {pdb['metadata']['name']} is still being processed by the server.",
                        10)
    await ctx.after_write(res, "MODIFIED", out)


async def _condition_and_delete(ctx: Context, request: web.Request, pods: Resource, scope: RequestScope, pod: Obj,
                                uid: str | None, rv: str | None, dry: bool, grace: int | None) -> None:
    """addConditionAndDeletePod: the DisruptionTarget condition (preconditions checked on the latest pod),
    then the pod's delete with the same preconditions (moved to the condition update's resourceVersion)."""
    store = ctx.storage(pods)
    key = ctx.key(scope)
    name = scope.name or ""
    if not dry:
        def add_condition(cur: Obj) -> Obj:
            cmd = cur["metadata"]
            if uid and uid != cmd.get("uid"):
                raise errors.conflict("Pod", name, "", f"the UID in the precondition ({uid}) does not match the UID "
                                                      f"in record ({cmd.get('uid', '')}). The object might have been "
                                                      "deleted and then recreated")
            if rv and rv != cmd.get("resourceVersion"):
                raise errors.conflict("Pod", name, "", f"the ResourceVersion in the precondition ({rv}) does not "
                                                      f"match the ResourceVersion in record "
                                                      f"({cmd.get('resourceVersion')}). The object might have been "
                                                      "modified")
            new = jsonenc.loads(jsonenc.dumps(cur))
            defaults.update_pod_condition(new, {"type": "DisruptionTarget", "status": "True",
                                                "reason": "EvictionByEvictionAPI",
                                                "message": "Eviction API: evicting"}, objects.now_rfc3339())
            new["metadata"].pop("resourceVersion", None)
            return objects.prepare_update(pods, new, cur, "status")
        try:
            out = await store.guaranteed_update(key, add_condition)
        except serr.StorageError as e:
            raise map_storage_error(e, pods, name) from None
        await ctx.after_write(pods, "MODIFIED", out)
        if rv:
            rv = out["metadata"]["resourceVersion"]
    await delete_one(ctx, request, pods, scope.namespace, name, uid=uid, rv=rv, dry=dry, grace=grace)
