"""OpenAPI documents: /openapi/v2 (swagger 2.0, JSON) and /openapi/v3 (index + one doc per group-version).

Public API
----------
``v2(registry) -> dict``
``v3_index(registry) -> dict``            ``{"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=..."}, ...}}``
``v3_group_version(registry, group, version) -> dict | None``
``v3_hash(registry, group, version) -> str | None``   the hash used in the index URL (for ETag/Cache-Control)

All three are memoized on the registry state (the identity of every served ``Resource``: CRD updates
create new Resource objects), so repeated requests cost a tuple build and a dict lookup. The returned
dicts are shared: callers must not mutate them.

What kubectl (1.37) reads, and why the documents look the way they do:

* ``kubectl create/apply`` (``--validate=strict`` default): ``QueryParamVerifierV3``
  (cli-runtime ``pkg/resource/query_param_verifier_v3.go``) fetches the GV document, walks
  ``paths``, takes the first PATCH operation whose ``x-kubernetes-group-version-kind`` (a single map
  on the operation) matches, and looks for a parameter named ``fieldValidation`` among that
  operation's own ``parameters``. Found -> server-side validation, no client-side schema check.
  A malformed GV document is an *error* that fails the command, so the document must always parse.
* ``kubectl apply`` (second run, kubectl ``pkg/cmd/apply/patcher.go``): ``gvkSupportsPatchOpenAPIV3``
  requires the PATCH requestBody to list ``application/strategic-merge-patch+json``; then
  ``strategicpatch.PatchMetaFromOpenAPIV3`` walks ``components.schemas`` starting at the schema whose
  ``x-kubernetes-group-version-kind`` (a list) matches. Every map- or list-valued field the user's
  manifest has in common with the live object is looked up by name in ``properties`` and an object
  schema without ``properties`` is an error ("unable to find api field"), after which kubectl warns
  and falls back (v2 protobuf, then its compiled-in Go types). So the built-in schemas below spell out
  every field that can hold a map or a list, down to the first atomic list or scalar-only map, and
  carry ``x-kubernetes-patch-strategy`` / ``x-kubernetes-patch-merge-key`` exactly where the k8s.io/api
  Go types carry ``patchStrategy``/``patchMergeKey`` tags (same table as machinery/patch.py's
  STRATEGIC_SCHEMA). Leaves are loose.
* Custom resources (and CRDs themselves) do not accept strategic merge patch here, so their PATCH
  lists only JSON patch and merge patch; kubectl then computes a JSON merge patch.
* ``/openapi/v2`` is fetched by client-go with the protobuf Accept only
  (``application/com.github.proto-openapi.spec.v2@v1.0+protobuf``); this JSON document is for other
  clients (kubectl only falls back to v2 when v3 fails).
"""
from __future__ import annotations

import copy
import hashlib
import json
import threading
from typing import Any

from machinery.resources import Registry, Resource

__all__ = ["v2", "v3_index", "v3_group_version", "v3_hash", "definition_name", "supports_strategic_merge"]

META = "io.k8s.apimachinery.pkg.apis.meta.v1."
CORE = "io.k8s.api.core.v1."

# ----------------------------------------------------------------------------- schema DSL
# Internal references are {"$ref": "<definition name>"}; rendering turns them into
# "#/definitions/<name>" (v2) or "#/components/schemas/<name>" (v3).


def ref(name: str) -> dict:
    return {"$ref": name}


def obj(props: dict | None = None, required: list[str] | None = None, **extra: Any) -> dict:
    d: dict[str, Any] = {"type": "object"}
    if props is not None:
        d["properties"] = props
    if required:
        d["required"] = required
    d.update(extra)
    return d


def arr(items: dict, merge_key: str | None = None, strategy: str | None = None,
        list_type: str | None = None, map_keys: list[str] | None = None) -> dict:
    d: dict[str, Any] = {"type": "array", "items": items}
    if list_type:
        d["x-kubernetes-list-type"] = list_type
    if map_keys:
        d["x-kubernetes-list-map-keys"] = map_keys
    if merge_key:
        d["x-kubernetes-patch-merge-key"] = merge_key
    if strategy:
        d["x-kubernetes-patch-strategy"] = strategy
    return d


def smap(values: dict | None = None) -> dict:
    return {"type": "object", "additionalProperties": values or {"type": "string", "default": ""}}


S = {"type": "string"}
B = {"type": "boolean"}
I32 = {"type": "integer", "format": "int32"}
I64 = {"type": "integer", "format": "int64"}
T = ref(META + "Time")
MT = ref(META + "MicroTime")
Q = ref("io.k8s.apimachinery.pkg.api.resource.Quantity")
IOS = ref("io.k8s.apimachinery.pkg.util.intstr.IntOrString")
LOOSE = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
STRS = arr(S, list_type="atomic")


def strs_atomic() -> dict:
    return arr(dict(S), list_type="atomic")


def merge_list(item: dict, key: str, strategy: str = "merge", map_keys: list[str] | None = None) -> dict:
    return arr(item, merge_key=key, strategy=strategy, list_type="map", map_keys=map_keys or [key])


def conditions(item: str) -> dict:
    return merge_list(ref(item), "type")


# ----------------------------------------------------------------------------- built-in definitions

DEFS: dict[str, dict] = {}


def _d(name: str, schema: dict, description: str = "") -> None:
    if description:
        schema = {"description": description, **schema}
    DEFS[name] = schema


# meta/v1
_d(META + "Time", {"type": "string", "format": "date-time"},
   "Time is a wrapper around time.Time which supports correct marshaling to YAML and JSON.")
_d(META + "MicroTime", {"type": "string", "format": "date-time"}, "MicroTime is version of Time with microsecond level precision.")
_d("io.k8s.apimachinery.pkg.api.resource.Quantity", {"x-kubernetes-int-or-string": True},
   "Quantity is a fixed-point representation of a number (a string like \"100m\" or \"1Gi\", or a number).")
_d("io.k8s.apimachinery.pkg.util.intstr.IntOrString", {"x-kubernetes-int-or-string": True},
   "IntOrString is a type that can hold an int32 or a string.")
_d(META + "FieldsV1", {"type": "object"}, "FieldsV1 stores a set of fields in a data structure like a Trie, in JSON format.")
_d(META + "ManagedFieldsEntry", obj({
    "apiVersion": S, "fieldsType": S, "fieldsV1": ref(META + "FieldsV1"), "manager": S, "operation": S,
    "subresource": S, "time": T}))
_d(META + "OwnerReference", obj({
    "apiVersion": S, "blockOwnerDeletion": B, "controller": B, "kind": S, "name": S, "uid": S},
    required=["apiVersion", "kind", "name", "uid"], **{"x-kubernetes-map-type": "atomic"}))
_d(META + "ObjectMeta", obj({
    "annotations": smap(), "creationTimestamp": T, "deletionGracePeriodSeconds": I64, "deletionTimestamp": T,
    "finalizers": arr(dict(S), strategy="merge", list_type="set"),
    "generateName": S, "generation": I64, "labels": smap(),
    "managedFields": arr(ref(META + "ManagedFieldsEntry"), list_type="atomic"),
    "name": S, "namespace": S,
    "ownerReferences": merge_list(ref(META + "OwnerReference"), "uid"),
    "resourceVersion": S, "selfLink": S, "uid": S}),
   "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.")
_d(META + "ListMeta", obj({"continue": S, "remainingItemCount": I64, "resourceVersion": S, "selfLink": S}))
_d(META + "Condition", obj({
    "lastTransitionTime": T, "message": S, "observedGeneration": I64, "reason": S, "status": S, "type": S},
    required=["type", "status", "lastTransitionTime", "reason", "message"]))
_d(META + "LabelSelectorRequirement", obj({"key": S, "operator": S, "values": strs_atomic()}, required=["key", "operator"]))
_d(META + "LabelSelector", obj({
    "matchExpressions": arr(ref(META + "LabelSelectorRequirement"), list_type="atomic"), "matchLabels": smap()},
    **{"x-kubernetes-map-type": "atomic"}))
_d(META + "StatusCause", obj({"field": S, "message": S, "reason": S}))
_d(META + "StatusDetails", obj({
    "causes": arr(ref(META + "StatusCause"), list_type="atomic"), "group": S, "kind": S, "name": S,
    "retryAfterSeconds": I32, "uid": S}))
_d(META + "Status", obj({
    "apiVersion": S, "code": I32, "details": ref(META + "StatusDetails"), "kind": S, "message": S,
    "metadata": ref(META + "ListMeta"), "reason": S, "status": S}),
   "Status is a return value for calls that don't return other objects.")
_d(META + "Patch", {"type": "object"},
   "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.")
_d(META + "DeleteOptions", obj({
    "apiVersion": S, "dryRun": strs_atomic(), "gracePeriodSeconds": I64,
    "ignoreStoreReadErrorWithClusterBreakingPotential": B, "kind": S, "orphanDependents": B,
    "preconditions": obj({"resourceVersion": S, "uid": S}), "propagationPolicy": S}))
_d(META + "WatchEvent", obj({"object": LOOSE, "type": S}, required=["type", "object"]))

# core/v1 leaves and small types
for _n, _p in {
    "LocalObjectReference": {"name": S},
    "ObjectReference": {"apiVersion": S, "fieldPath": S, "kind": S, "name": S, "namespace": S,
                        "resourceVersion": S, "uid": S},
    "KeyToPath": {"key": S, "mode": I32, "path": S},
    "ObjectFieldSelector": {"apiVersion": S, "fieldPath": S},
    "ResourceFieldSelector": {"containerName": S, "divisor": Q, "resource": S},
    "ConfigMapKeySelector": {"key": S, "name": S, "optional": B},
    "SecretKeySelector": {"key": S, "name": S, "optional": B},
    "FileKeySelector": {"key": S, "optional": B, "path": S, "volumeName": S},
    "SELinuxOptions": {"level": S, "role": S, "type": S, "user": S},
    "WindowsSecurityContextOptions": {"gmsaCredentialSpec": S, "gmsaCredentialSpecName": S, "hostProcess": B,
                                      "runAsUserName": S},
    "SeccompProfile": {"localhostProfile": S, "type": S},
    "AppArmorProfile": {"localhostProfile": S, "type": S},
    "Sysctl": {"name": S, "value": S},
    "ExecAction": {"command": STRS},
    "HTTPHeader": {"name": S, "value": S},
    "TCPSocketAction": {"host": S, "port": IOS},
    "GRPCAction": {"port": I32, "service": S},
    "SleepAction": {"seconds": I64},
    "ContainerPort": {"containerPort": I32, "hostIP": S, "hostPort": I32, "name": S, "protocol": S},
    "VolumeMount": {"mountPath": S, "mountPropagation": S, "name": S, "readOnly": B,
                    "recursiveReadOnly": S, "subPath": S, "subPathExpr": S},
    "VolumeDevice": {"devicePath": S, "name": S},
    "ContainerResizePolicy": {"resourceName": S, "restartPolicy": S},
    "ResourceClaim": {"name": S, "request": S},
    "Toleration": {"effect": S, "key": S, "operator": S, "tolerationSeconds": I64, "value": S},
    "PodReadinessGate": {"conditionType": S},
    "PodSchedulingGate": {"name": S},
    "PodResourceClaim": {"name": S, "resourceClaimName": S, "resourceClaimTemplateName": S},
    "PodOS": {"name": S},
    "PodDNSConfigOption": {"name": S, "value": S},
    "HostIP": {"ip": S},
    "PodIP": {"ip": S},
    "PodCondition": {"lastProbeTime": T, "lastTransitionTime": T, "message": S, "observedGeneration": I64,
                     "reason": S, "status": S, "type": S},
    "NamespaceCondition": {"lastTransitionTime": T, "message": S, "reason": S, "status": S, "type": S},
    "NodeCondition": {"lastHeartbeatTime": T, "lastTransitionTime": T, "message": S, "reason": S,
                      "status": S, "type": S},
    "NodeAddress": {"address": S, "type": S},
    "Taint": {"effect": S, "key": S, "timeAdded": T, "value": S},
    "ServicePort": {"appProtocol": S, "name": S, "nodePort": I32, "port": I32, "protocol": S, "targetPort": IOS},
    "EventSource": {"component": S, "host": S},
    "EventSeries": {"count": I32, "lastObservedTime": MT},
    "ClientIPConfig": {"timeoutSeconds": I32},
    "PortStatus": {"error": S, "port": I32, "protocol": S},
    "NodeSelectorRequirement": {"key": S, "operator": S, "values": STRS},
    "EmptyDirVolumeSource": {"medium": S, "sizeLimit": Q},
    "HostPathVolumeSource": {"path": S, "type": S},
    "PersistentVolumeClaimVolumeSource": {"claimName": S, "readOnly": B},
    "NFSVolumeSource": {"path": S, "readOnly": B, "server": S},
    "ImageVolumeSource": {"pullPolicy": S, "reference": S},
}.items():
    _d(CORE + _n, obj(_p))

_d(CORE + "EnvVarSource", obj({
    "configMapKeyRef": ref(CORE + "ConfigMapKeySelector"), "fieldRef": ref(CORE + "ObjectFieldSelector"),
    "fileKeyRef": ref(CORE + "FileKeySelector"), "resourceFieldRef": ref(CORE + "ResourceFieldSelector"),
    "secretKeyRef": ref(CORE + "SecretKeySelector")}))
_d(CORE + "EnvVar", obj({"name": S, "value": S, "valueFrom": ref(CORE + "EnvVarSource")}, required=["name"]))
_d(CORE + "EnvFromSource", obj({
    "configMapRef": obj({"name": S, "optional": B}), "prefix": S, "secretRef": obj({"name": S, "optional": B})}))
_d(CORE + "ResourceRequirements", obj({
    "claims": arr(ref(CORE + "ResourceClaim"), list_type="map", map_keys=["name"]),
    "limits": smap(Q), "requests": smap(Q)}))
_d(CORE + "HTTPGetAction", obj({
    "host": S, "httpHeaders": arr(ref(CORE + "HTTPHeader"), list_type="atomic"), "path": S, "port": IOS,
    "scheme": S}))
_d(CORE + "Probe", obj({
    "exec": ref(CORE + "ExecAction"), "failureThreshold": I32, "grpc": ref(CORE + "GRPCAction"),
    "httpGet": ref(CORE + "HTTPGetAction"), "initialDelaySeconds": I32, "periodSeconds": I32,
    "successThreshold": I32, "tcpSocket": ref(CORE + "TCPSocketAction"), "terminationGracePeriodSeconds": I64,
    "timeoutSeconds": I32}))
_d(CORE + "LifecycleHandler", obj({
    "exec": ref(CORE + "ExecAction"), "httpGet": ref(CORE + "HTTPGetAction"), "sleep": ref(CORE + "SleepAction"),
    "tcpSocket": ref(CORE + "TCPSocketAction")}))
_d(CORE + "Lifecycle", obj({
    "postStart": ref(CORE + "LifecycleHandler"), "preStop": ref(CORE + "LifecycleHandler"), "stopSignal": S}))
_d(CORE + "Capabilities", obj({"add": STRS, "drop": STRS}))
_d(CORE + "SecurityContext", obj({
    "allowPrivilegeEscalation": B, "appArmorProfile": ref(CORE + "AppArmorProfile"),
    "capabilities": ref(CORE + "Capabilities"), "privileged": B, "procMount": S, "readOnlyRootFilesystem": B,
    "runAsGroup": I64, "runAsNonRoot": B, "runAsUser": I64, "seLinuxOptions": ref(CORE + "SELinuxOptions"),
    "seccompProfile": ref(CORE + "SeccompProfile"),
    "windowsOptions": ref(CORE + "WindowsSecurityContextOptions")}))
_d(CORE + "PodSecurityContext", obj({
    "appArmorProfile": ref(CORE + "AppArmorProfile"), "fsGroup": I64, "fsGroupChangePolicy": S,
    "runAsGroup": I64, "runAsNonRoot": B, "runAsUser": I64, "seLinuxChangePolicy": S,
    "seLinuxOptions": ref(CORE + "SELinuxOptions"), "seccompProfile": ref(CORE + "SeccompProfile"),
    "supplementalGroups": arr(dict(I64), list_type="atomic"), "supplementalGroupsPolicy": S,
    "sysctls": arr(ref(CORE + "Sysctl"), list_type="atomic"),
    "windowsOptions": ref(CORE + "WindowsSecurityContextOptions")}))

_CONTAINER_PROPS = {
    "args": STRS, "command": STRS,
    "env": merge_list(ref(CORE + "EnvVar"), "name"),
    "envFrom": arr(ref(CORE + "EnvFromSource"), list_type="atomic"),
    "image": S, "imagePullPolicy": S, "lifecycle": ref(CORE + "Lifecycle"),
    "livenessProbe": ref(CORE + "Probe"), "name": S,
    "ports": merge_list(ref(CORE + "ContainerPort"), "containerPort", map_keys=["containerPort", "protocol"]),
    "readinessProbe": ref(CORE + "Probe"),
    "resizePolicy": arr(ref(CORE + "ContainerResizePolicy"), list_type="atomic"),
    "resources": ref(CORE + "ResourceRequirements"), "restartPolicy": S,
    "restartPolicyRules": arr(LOOSE, list_type="atomic"),
    "securityContext": ref(CORE + "SecurityContext"), "startupProbe": ref(CORE + "Probe"),
    "stdin": B, "stdinOnce": B, "terminationMessagePath": S, "terminationMessagePolicy": S, "tty": B,
    "volumeDevices": merge_list(ref(CORE + "VolumeDevice"), "devicePath"),
    "volumeMounts": merge_list(ref(CORE + "VolumeMount"), "mountPath"),
    "workingDir": S,
}
_d(CORE + "Container", obj(_CONTAINER_PROPS, required=["name"]),
   "A single application container that you want to run within a pod.")
_d(CORE + "EphemeralContainer", obj({**_CONTAINER_PROPS, "targetContainerName": S}, required=["name"]))

_d(CORE + "ConfigMapVolumeSource", obj({
    "defaultMode": I32, "items": arr(ref(CORE + "KeyToPath"), list_type="atomic"), "name": S, "optional": B}))
_d(CORE + "SecretVolumeSource", obj({
    "defaultMode": I32, "items": arr(ref(CORE + "KeyToPath"), list_type="atomic"), "optional": B,
    "secretName": S}))
_d(CORE + "DownwardAPIVolumeSource", obj({"defaultMode": I32, "items": arr(LOOSE, list_type="atomic")}))
_d(CORE + "ProjectedVolumeSource", obj({"defaultMode": I32, "sources": arr(LOOSE, list_type="atomic")}))
_d(CORE + "CSIVolumeSource", obj({
    "driver": S, "fsType": S, "nodePublishSecretRef": ref(CORE + "LocalObjectReference"), "readOnly": B,
    "volumeAttributes": smap()}))
_d(CORE + "EphemeralVolumeSource", obj({"volumeClaimTemplate": obj({
    "metadata": ref(META + "ObjectMeta"),
    "spec": obj({"accessModes": STRS, "dataSource": LOOSE, "dataSourceRef": LOOSE,
                 "resources": obj({"limits": smap(Q), "requests": smap(Q)}),
                 "selector": ref(META + "LabelSelector"), "storageClassName": S,
                 "volumeAttributesClassName": S, "volumeMode": S, "volumeName": S})})}))
_VOLUME_SOURCES = {
    "configMap": ref(CORE + "ConfigMapVolumeSource"), "secret": ref(CORE + "SecretVolumeSource"),
    "emptyDir": ref(CORE + "EmptyDirVolumeSource"), "hostPath": ref(CORE + "HostPathVolumeSource"),
    "persistentVolumeClaim": ref(CORE + "PersistentVolumeClaimVolumeSource"),
    "projected": ref(CORE + "ProjectedVolumeSource"), "downwardAPI": ref(CORE + "DownwardAPIVolumeSource"),
    "nfs": ref(CORE + "NFSVolumeSource"), "csi": ref(CORE + "CSIVolumeSource"),
    "ephemeral": ref(CORE + "EphemeralVolumeSource"), "image": ref(CORE + "ImageVolumeSource"),
}
for _src in ("awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "fc", "flexVolume", "flocker",
             "gcePersistentDisk", "gitRepo", "glusterfs", "iscsi", "photonPersistentDisk", "portworxVolume",
             "quobyte", "rbd", "scaleIO", "storageos", "vsphereVolume"):
    _VOLUME_SOURCES[_src] = LOOSE
_d(CORE + "Volume", obj({"name": S, **_VOLUME_SOURCES}, required=["name"]))

_d(CORE + "NodeSelector", obj({"nodeSelectorTerms": arr(LOOSE, list_type="atomic")},
                              **{"x-kubernetes-map-type": "atomic"}))
_d(CORE + "NodeAffinity", obj({
    "preferredDuringSchedulingIgnoredDuringExecution": arr(LOOSE, list_type="atomic"),
    "requiredDuringSchedulingIgnoredDuringExecution": ref(CORE + "NodeSelector")}))
_d(CORE + "PodAffinity", obj({
    "preferredDuringSchedulingIgnoredDuringExecution": arr(LOOSE, list_type="atomic"),
    "requiredDuringSchedulingIgnoredDuringExecution": arr(LOOSE, list_type="atomic")}))
_d(CORE + "Affinity", obj({
    "nodeAffinity": ref(CORE + "NodeAffinity"), "podAffinity": ref(CORE + "PodAffinity"),
    "podAntiAffinity": ref(CORE + "PodAffinity")}))
_d(CORE + "HostAlias", obj({"hostnames": STRS, "ip": S}, required=["ip"]))
_d(CORE + "PodDNSConfig", obj({
    "nameservers": STRS, "options": arr(ref(CORE + "PodDNSConfigOption"), list_type="atomic"), "searches": STRS}))
_d(CORE + "TopologySpreadConstraint", obj({
    "labelSelector": ref(META + "LabelSelector"), "matchLabelKeys": STRS, "maxSkew": I32, "minDomains": I32,
    "nodeAffinityPolicy": S, "nodeTaintsPolicy": S, "topologyKey": S, "whenUnsatisfiable": S}))

_d(CORE + "PodSpec", obj({
    "activeDeadlineSeconds": I64, "affinity": ref(CORE + "Affinity"), "automountServiceAccountToken": B,
    "containers": merge_list(ref(CORE + "Container"), "name"),
    "dnsConfig": ref(CORE + "PodDNSConfig"), "dnsPolicy": S, "enableServiceLinks": B,
    "ephemeralContainers": merge_list(ref(CORE + "EphemeralContainer"), "name"),
    "hostAliases": merge_list(ref(CORE + "HostAlias"), "ip"),
    "hostIPC": B, "hostNetwork": B, "hostPID": B, "hostUsers": B, "hostname": S, "hostnameOverride": S,
    "imagePullSecrets": merge_list(ref(CORE + "LocalObjectReference"), "name"),
    "initContainers": merge_list(ref(CORE + "Container"), "name"),
    "nodeName": S, "nodeSelector": smap(), "os": ref(CORE + "PodOS"), "overhead": smap(Q),
    "preemptionPolicy": S, "priority": I32, "priorityClassName": S,
    "readinessGates": arr(ref(CORE + "PodReadinessGate"), list_type="atomic"),
    "resourceClaims": merge_list(ref(CORE + "PodResourceClaim"), "name", strategy="merge,retainKeys"),
    "resources": ref(CORE + "ResourceRequirements"), "restartPolicy": S, "runtimeClassName": S,
    "schedulerName": S, "schedulingGates": merge_list(ref(CORE + "PodSchedulingGate"), "name"),
    "securityContext": ref(CORE + "PodSecurityContext"), "serviceAccount": S, "serviceAccountName": S,
    "setHostnameAsFQDN": B, "shareProcessNamespace": B, "subdomain": S, "terminationGracePeriodSeconds": I64,
    "tolerations": arr(ref(CORE + "Toleration"), list_type="atomic"),
    "topologySpreadConstraints": merge_list(ref(CORE + "TopologySpreadConstraint"), "topologyKey",
                                            map_keys=["topologyKey", "whenUnsatisfiable"]),
    "volumes": merge_list(ref(CORE + "Volume"), "name", strategy="merge,retainKeys"),
    "workloadRef": LOOSE,
}, required=["containers"]), "PodSpec is a description of a pod.")
_d(CORE + "PodStatus", obj({
    "allocatedResources": smap(Q), "conditions": conditions(CORE + "PodCondition"),
    "containerStatuses": arr(LOOSE, list_type="atomic"), "ephemeralContainerStatuses": arr(LOOSE, list_type="atomic"),
    "extendedResourceClaimStatus": LOOSE, "hostIP": S, "hostIPs": merge_list(ref(CORE + "HostIP"), "ip"),
    "initContainerStatuses": arr(LOOSE, list_type="atomic"), "message": S, "nominatedNodeName": S,
    "observedGeneration": I64, "phase": S, "podIP": S, "podIPs": merge_list(ref(CORE + "PodIP"), "ip"),
    "qosClass": S, "reason": S, "resize": S,
    "resourceClaimStatuses": merge_list(LOOSE, "name", strategy="merge,retainKeys"),
    "resources": ref(CORE + "ResourceRequirements"), "startTime": T}))

_d(CORE + "NamespaceSpec", obj({"finalizers": STRS}))
_d(CORE + "NamespaceStatus", obj({"conditions": conditions(CORE + "NamespaceCondition"), "phase": S}))
_d(CORE + "NodeSpec", obj({
    "configSource": LOOSE, "externalID": S, "podCIDR": S,
    "podCIDRs": arr(dict(S), strategy="merge", list_type="set"), "providerID": S,
    "taints": arr(ref(CORE + "Taint"), list_type="atomic"), "unschedulable": B}))
_d(CORE + "NodeSystemInfo", obj({
    "architecture": S, "bootID": S, "containerRuntimeVersion": S, "kernelVersion": S, "kubeProxyVersion": S,
    "kubeletVersion": S, "machineID": S, "operatingSystem": S, "osImage": S, "swap": LOOSE, "systemUUID": S}))
_d(CORE + "NodeStatus", obj({
    "addresses": merge_list(ref(CORE + "NodeAddress"), "type"), "allocatable": smap(Q), "capacity": smap(Q),
    "conditions": conditions(CORE + "NodeCondition"), "config": LOOSE,
    "daemonEndpoints": obj({"kubeletEndpoint": obj({"Port": I32})}), "declaredFeatures": STRS,
    "features": LOOSE, "images": arr(LOOSE, list_type="atomic"), "nodeInfo": ref(CORE + "NodeSystemInfo"),
    "phase": S, "runtimeHandlers": arr(LOOSE, list_type="atomic"),
    "volumesAttached": arr(LOOSE, list_type="atomic"), "volumesInUse": STRS}))
_d(CORE + "ServiceSpec", obj({
    "allocateLoadBalancerNodePorts": B, "clusterIP": S, "clusterIPs": STRS, "externalIPs": STRS,
    "externalName": S, "externalTrafficPolicy": S, "healthCheckNodePort": I32, "internalTrafficPolicy": S,
    "ipFamilies": STRS, "ipFamilyPolicy": S, "loadBalancerClass": S, "loadBalancerIP": S,
    "loadBalancerSourceRanges": STRS,
    "ports": merge_list(ref(CORE + "ServicePort"), "port", map_keys=["port", "protocol"]),
    "publishNotReadyAddresses": B, "selector": smap(), "sessionAffinity": S,
    "sessionAffinityConfig": obj({"clientIP": ref(CORE + "ClientIPConfig")}), "trafficDistribution": S,
    "type": S}))
_d(CORE + "ServiceStatus", obj({
    "conditions": conditions(META + "Condition"),
    "loadBalancer": obj({"ingress": arr(LOOSE, list_type="atomic")})}))

_TOP = {"apiVersion": S, "kind": S, "metadata": ref(META + "ObjectMeta")}
_KIND_SCHEMAS: dict[tuple[str, str], tuple[str, dict]] = {
    ("", "Namespace"): (CORE + "Namespace", obj({**_TOP, "spec": ref(CORE + "NamespaceSpec"),
                                                  "status": ref(CORE + "NamespaceStatus")})),
    ("", "ConfigMap"): (CORE + "ConfigMap", obj({**_TOP, "binaryData": smap({"type": "string", "format": "byte"}),
                                                  "data": smap(), "immutable": B})),
    ("", "Secret"): (CORE + "Secret", obj({**_TOP, "data": smap({"type": "string", "format": "byte"}),
                                            "immutable": B, "stringData": smap(), "type": S})),
    ("", "Pod"): (CORE + "Pod", obj({**_TOP, "spec": ref(CORE + "PodSpec"), "status": ref(CORE + "PodStatus")})),
    ("", "Node"): (CORE + "Node", obj({**_TOP, "spec": ref(CORE + "NodeSpec"), "status": ref(CORE + "NodeStatus")})),
    ("", "Service"): (CORE + "Service", obj({**_TOP, "spec": ref(CORE + "ServiceSpec"),
                                              "status": ref(CORE + "ServiceStatus")})),
    ("", "ServiceAccount"): (CORE + "ServiceAccount", obj({
        **_TOP, "automountServiceAccountToken": B,
        "imagePullSecrets": arr(ref(CORE + "LocalObjectReference"), list_type="atomic"),
        "secrets": merge_list(ref(CORE + "ObjectReference"), "name")})),
    ("", "Event"): (CORE + "Event", obj({
        **_TOP, "action": S, "count": I32, "eventTime": MT, "firstTimestamp": T,
        "involvedObject": ref(CORE + "ObjectReference"), "lastTimestamp": T, "message": S, "reason": S,
        "related": ref(CORE + "ObjectReference"), "reportingComponent": S, "reportingInstance": S,
        "series": ref(CORE + "EventSeries"), "source": ref(CORE + "EventSource"), "type": S},
        required=["metadata", "involvedObject"])),
    ("coordination.k8s.io", "Lease"): ("io.k8s.api.coordination.v1.Lease", obj({**_TOP, "spec": obj({
        "acquireTime": MT, "holderIdentity": S, "leaseDurationSeconds": I32, "leaseTransitions": I32,
        "preferredHolder": S, "renewTime": MT, "strategy": S})})),
}
_RBAC = "io.k8s.api.rbac.v1."
_d(_RBAC + "PolicyRule", obj({"apiGroups": STRS, "nonResourceURLs": STRS, "resourceNames": STRS,
                               "resources": STRS, "verbs": STRS}, required=["verbs"]))
_d(_RBAC + "Subject", obj({"apiGroup": S, "kind": S, "name": S, "namespace": S}, required=["kind", "name"],
                          **{"x-kubernetes-map-type": "atomic"}))
_d(_RBAC + "RoleRef", obj({"apiGroup": S, "kind": S, "name": S}, required=["apiGroup", "kind", "name"],
                          **{"x-kubernetes-map-type": "atomic"}))
_RULES = arr(ref(_RBAC + "PolicyRule"), list_type="atomic")
_SUBJECTS = arr(ref(_RBAC + "Subject"), list_type="atomic")
_RBAC_G = "rbac.authorization.k8s.io"
_KIND_SCHEMAS.update({
    (_RBAC_G, "Role"): (_RBAC + "Role", obj({**_TOP, "rules": _RULES})),
    (_RBAC_G, "ClusterRole"): (_RBAC + "ClusterRole", obj({
        **_TOP, "aggregationRule": obj({"clusterRoleSelectors": arr(ref(META + "LabelSelector"), list_type="atomic")}),
        "rules": _RULES})),
    (_RBAC_G, "RoleBinding"): (_RBAC + "RoleBinding", obj({**_TOP, "roleRef": ref(_RBAC + "RoleRef"),
                                                            "subjects": _SUBJECTS}, required=["roleRef"])),
    (_RBAC_G, "ClusterRoleBinding"): (_RBAC + "ClusterRoleBinding", obj({
        **_TOP, "roleRef": ref(_RBAC + "RoleRef"), "subjects": _SUBJECTS}, required=["roleRef"])),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): (
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
        obj({**_TOP, "spec": LOOSE, "status": LOOSE}, required=["spec"])),
})


# ----------------------------------------------------------------------------- per-resource pieces

def _reverse_domain(group: str) -> str:
    return ".".join(reversed(group.split("."))) if group else ""


def definition_name(r: Resource) -> str:
    """Upstream-style definition name (io.k8s.api.core.v1.Pod; com.example.stable.v1.CronTab for CRs)."""
    known = _KIND_SCHEMAS.get((r.group, r.kind))
    if known and not r.custom:
        return known[0]
    return f"{_reverse_domain(r.group)}.{r.version}.{r.kind}"


def _list_definition_name(r: Resource) -> str:
    base = definition_name(r)
    return base[: -len(r.kind)] + r.list_kind


def supports_strategic_merge(r: Resource) -> bool:
    """Whether this server applies strategic merge patch to the resource (built-ins with patch metadata)."""
    if r.custom:
        return False
    try:
        from machinery.patch import STRATEGIC_SCHEMA
    except Exception:  # pragma: no cover - patch module unavailable
        return (r.group, r.kind) in _KIND_SCHEMAS and r.kind != "CustomResourceDefinition"
    return r.plural in STRATEGIC_SCHEMA


def _gvk(r: Resource) -> dict:
    return {"group": r.group, "kind": r.kind, "version": r.version}


def _kind_schema(r: Resource) -> dict:
    if not r.custom and (r.group, r.kind) in _KIND_SCHEMAS:
        s = copy.deepcopy(_KIND_SCHEMAS[(r.group, r.kind)][1])
    elif isinstance(r.schema, dict) and r.schema:
        s = copy.deepcopy(r.schema)
        s.setdefault("type", "object")
        props = s.setdefault("properties", {})
        props.setdefault("apiVersion", dict(S))
        props.setdefault("kind", dict(S))
        props["metadata"] = ref(META + "ObjectMeta")
    else:
        s = {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
             "properties": {**_TOP}}
    s["x-kubernetes-group-version-kind"] = [_gvk(r)]
    return s


def _list_schema(r: Resource) -> dict:
    return {
        "type": "object",
        "required": ["items"],
        "properties": {"apiVersion": S, "items": {"type": "array", "items": ref(definition_name(r))},
                       "kind": S, "metadata": ref(META + "ListMeta")},
        "x-kubernetes-group-version-kind": [{"group": r.group, "kind": r.list_kind, "version": r.version}],
    }


def _closure(names: list[str], extra: dict[str, dict]) -> dict[str, dict]:
    """All definitions reachable from `names` (looked up in `extra` first, then DEFS)."""
    out: dict[str, dict] = {}
    todo = list(names)
    while todo:
        n = todo.pop()
        if n in out:
            continue
        s = extra.get(n) if n in extra else DEFS.get(n)
        if s is None:
            continue
        out[n] = s
        stack = [s]
        while stack:
            x = stack.pop()
            if isinstance(x, dict):
                rr = x.get("$ref")
                if isinstance(rr, str) and not rr.startswith("#") and rr not in out:
                    todo.append(rr)
                stack.extend(x.values())
            elif isinstance(x, list):
                stack.extend(x)
    return dict(sorted(out.items()))


def _render(x: Any, prefix: str) -> Any:
    """Turn internal refs into JSON pointers (`prefix` + name)."""
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            if k == "$ref" and isinstance(v, str) and not v.startswith("#"):
                out[k] = prefix + v
            else:
                out[k] = _render(v, prefix)
        return out
    if isinstance(x, list):
        return [_render(v, prefix) for v in x]
    return x


# ----------------------------------------------------------------------------- operations

def _q(name: str, desc: str, typ: str = "string") -> dict:
    return {"name": name, "in": "query", "description": desc, "type": typ}


_P_PRETTY = _q("pretty", "If 'true', then the output is pretty printed.")
_P_DRYRUN = _q("dryRun", "When present, indicates that modifications should not be persisted. Valid value: All")
_P_MANAGER = _q("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes.")
_P_FIELDVAL = _q("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request "
                                    "containing unknown or duplicate fields. Valid values are: Ignore, Warn, Strict.")
_P_FORCE = _q("force", "Force is going to \"force\" Apply requests. It must be unset for non-apply patch requests.",
              "boolean")
_LIST_PARAMS = [
    _q("allowWatchBookmarks", "allowWatchBookmarks requests watch events with type \"BOOKMARK\".", "boolean"),
    _q("continue", "The continue option should be set when retrieving more results from the server."),
    _q("fieldSelector", "A selector to restrict the list of returned objects by their fields."),
    _q("labelSelector", "A selector to restrict the list of returned objects by their labels."),
    _q("limit", "limit is a maximum number of responses to return for a list call.", "integer"),
    _q("resourceVersion", "resourceVersion sets a constraint on what resource versions a request may be served from."),
    _q("resourceVersionMatch", "resourceVersionMatch determines how resourceVersion is applied to list calls."),
    _q("sendInitialEvents", "`sendInitialEvents=true` may be set together with `watch=true`.", "boolean"),
    _q("shardSelector", "shardSelector restricts the list of returned objects to a hash range (alpha).") ,
    _q("timeoutSeconds", "Timeout for the list/watch call.", "integer"),
    _q("watch", "Watch for changes to the described resources and return them as a stream of add, update, and "
                "remove notifications.", "boolean"),
]

_JSON = "application/json"
_PRODUCES = [_JSON, "application/yaml"]
_WATCH_PRODUCES = [_JSON, "application/json;stream=watch"]


def _patch_types(r: Resource) -> list[str]:
    out = ["application/json-patch+json", "application/merge-patch+json"]
    if supports_strategic_merge(r):
        out.append("application/strategic-merge-patch+json")
    return out


def _op_id(verb: str, r: Resource, namespaced: bool, suffix: str = "") -> str:
    g = r.group.split(".")[0] if r.group else "core"
    gv = g[:1].upper() + g[1:] + r.version[:1].upper() + r.version[1:]
    return f"{verb}{gv}{'Namespaced' if namespaced else ''}{r.kind}{suffix}"


def _operations(r: Resource) -> list[tuple[str, str, dict, list[dict]]]:
    """(path, method, operation, path-level parameters) for one resource, in an abstract form.

    Operation = dict with keys: description, operationId, action, params (query params), body
    (definition name or None), consumes (list), responses {code: definition name or None}, list (bool).
    """
    base = "/api/" + r.version if not r.group else f"/apis/{r.group}/{r.version}"
    kind_def = definition_name(r)
    list_def = _list_definition_name(r)
    name_p = {"name": "name", "in": "path", "description": f"name of the {r.kind}", "required": True, "type": "string"}
    ns_p = {"name": "namespace", "in": "path", "description": "object name and auth scope, such as for teams and "
            "projects", "required": True, "type": "string"}
    scope = [ns_p] if r.namespaced else []
    coll = f"{base}/namespaces/{{namespace}}/{r.plural}" if r.namespaced else f"{base}/{r.plural}"
    item = coll + "/{name}"
    ns = r.namespaced
    write = [_P_DRYRUN, _P_MANAGER, _P_FIELDVAL]
    ops: list[tuple[str, str, dict, list[dict]]] = []
    ops.append((coll, "get", {"description": f"list or watch objects of kind {r.kind}", "operationId":
                              _op_id("list", r, ns), "action": "list", "params": _LIST_PARAMS,
                              "responses": {"200": list_def}, "list": True}, scope + [_P_PRETTY]))
    ops.append((coll, "post", {"description": f"create a {r.kind}", "operationId": _op_id("create", r, ns),
                               "action": "post", "params": write, "body": kind_def, "consumes": [_JSON],
                               "responses": {"200": kind_def, "201": kind_def, "202": kind_def}},
                scope + [_P_PRETTY]))
    ops.append((coll, "delete", {"description": f"delete collection of {r.kind}", "operationId":
                                 _op_id("deletecollection", r, ns, ""), "action": "deletecollection",
                                 "params": [_P_DRYRUN] + _LIST_PARAMS, "body": META + "DeleteOptions",
                                 "consumes": [_JSON], "responses": {"200": META + "Status"}},
                scope + [_P_PRETTY]))
    ops.append((item, "get", {"description": f"read the specified {r.kind}", "operationId": _op_id("read", r, ns),
                              "action": "get", "params": [], "responses": {"200": kind_def}},
                [name_p] + scope + [_P_PRETTY]))
    ops.append((item, "put", {"description": f"replace the specified {r.kind}", "operationId":
                              _op_id("replace", r, ns), "action": "put", "params": write, "body": kind_def,
                              "consumes": [_JSON], "responses": {"200": kind_def, "201": kind_def}},
                [name_p] + scope + [_P_PRETTY]))
    ops.append((item, "patch", {"description": f"partially update the specified {r.kind}", "operationId":
                                _op_id("patch", r, ns), "action": "patch", "params": write + [_P_FORCE],
                                "body": META + "Patch", "consumes": _patch_types(r),
                                "responses": {"200": kind_def, "201": kind_def}},
                [name_p] + scope + [_P_PRETTY]))
    ops.append((item, "delete", {"description": f"delete a {r.kind}", "operationId": _op_id("delete", r, ns),
                                 "action": "delete", "params": [_P_DRYRUN,
                                                                _q("gracePeriodSeconds", "The duration in seconds "
                                                                   "before the object should be deleted.", "integer"),
                                                                _q("propagationPolicy", "Whether and how garbage "
                                                                   "collection will be performed.")],
                                 "body": META + "DeleteOptions", "consumes": [_JSON],
                                 "responses": {"200": META + "Status", "202": META + "Status"}},
                [name_p] + scope + [_P_PRETTY]))
    if r.namespaced:
        ops.append((f"{base}/{r.plural}", "get", {"description": f"list or watch objects of kind {r.kind}",
                                                  "operationId": _op_id("list", r, False, "ForAllNamespaces"),
                                                  "action": "list", "params": _LIST_PARAMS,
                                                  "responses": {"200": list_def}, "list": True}, [_P_PRETTY]))
    if r.status_subresource:
        st = item + "/status"
        ops.append((st, "get", {"description": f"read status of the specified {r.kind}", "operationId":
                                _op_id("read", r, ns, "Status"), "action": "get", "params": [],
                                "responses": {"200": kind_def}}, [name_p] + scope + [_P_PRETTY]))
        ops.append((st, "put", {"description": f"replace status of the specified {r.kind}", "operationId":
                                _op_id("replace", r, ns, "Status"), "action": "put", "params": write,
                                "body": kind_def, "consumes": [_JSON],
                                "responses": {"200": kind_def, "201": kind_def}}, [name_p] + scope + [_P_PRETTY]))
        ops.append((st, "patch", {"description": f"partially update status of the specified {r.kind}",
                                  "operationId": _op_id("patch", r, ns, "Status"), "action": "patch",
                                  "params": write + [_P_FORCE], "body": META + "Patch",
                                  "consumes": _patch_types(r), "responses": {"200": kind_def, "201": kind_def}},
                   [name_p] + scope + [_P_PRETTY]))
    return ops


def _tag(r: Resource) -> str:
    if not r.group:
        return "core_" + r.version
    return r.group.split(".")[0].replace("-", "") + "_" + r.version


def _v2_param(p: dict) -> dict:
    out = {"type": p["type"], "uniqueItems": True, "description": p["description"], "name": p["name"], "in": p["in"]}
    if p.get("required"):
        out["required"] = True
    return out


def _v3_param(p: dict) -> dict:
    out: dict[str, Any] = {"name": p["name"], "in": p["in"], "description": p["description"]}
    if p.get("required"):
        out["required"] = True
    out["schema"] = {"type": p["type"], "uniqueItems": True}
    return out


def _finish_operation(o: dict, r: Resource, op: dict, schema_of) -> None:
    """Responses and the x-kubernetes extensions, the same in v2 and v3; `schema_of(definition)`
    gives the version's response body fields (None: a bare "OK")."""
    responses = {}
    for code, d in op["responses"].items():
        body = schema_of(d)
        if body is None:
            responses[code] = {"description": "OK"}
        else:
            responses[code] = {"description": {"200": "OK", "201": "Created"}.get(code, "Accepted"), **body}
    responses["401"] = {"description": "Unauthorized"}
    o["responses"] = responses
    o["x-kubernetes-action"] = op["action"]
    o["x-kubernetes-group-version-kind"] = _gvk(r)


def _v2_paths(resources: list[Resource]) -> dict:
    paths: dict[str, dict] = {}
    for r in resources:
        for path, method, op, path_params in _operations(r):
            entry = paths.setdefault(path, {})
            o: dict[str, Any] = {"description": op["description"]}
            o["consumes"] = op.get("consumes") or ["*/*"]
            o["produces"] = _WATCH_PRODUCES if op.get("list") else _PRODUCES
            o["schemes"] = ["https"]
            o["tags"] = [_tag(r)]
            o["operationId"] = op["operationId"]
            params = [_v2_param(p) for p in op["params"]]
            if op.get("body"):
                params.insert(0, {"name": "body", "in": "body", "required": op["action"] != "deletecollection"
                                  and op["action"] != "delete", "schema": ref(op["body"])})
            if params:
                o["parameters"] = params
            _finish_operation(o, r, op, lambda d: {"schema": ref(d)} if d else None)
            entry[method] = o
            entry["parameters"] = [_v2_param(p) for p in path_params]
    return dict(sorted(paths.items()))


def _v3_paths(resources: list[Resource]) -> dict:
    paths: dict[str, dict] = {}
    for r in resources:
        for path, method, op, path_params in _operations(r):
            entry = paths.setdefault(path, {})
            o: dict[str, Any] = {"tags": [_tag(r)], "description": op["description"],
                                 "operationId": op["operationId"]}
            params = [_v3_param(p) for p in op["params"]]
            if params:
                o["parameters"] = params
            if op.get("body"):
                o["requestBody"] = {"content": {ct: {"schema": ref(op["body"])} for ct in op["consumes"]},
                                    "required": op["action"] not in ("delete", "deletecollection")}
            produces = _WATCH_PRODUCES if op.get("list") else _PRODUCES
            _finish_operation(o, r, op, lambda d: {"content": {ct: {"schema": ref(d)} for ct in produces}})
            entry[method] = o
            entry["parameters"] = [_v3_param(p) for p in path_params]
    return dict(sorted(paths.items()))


def _definitions(resources: list[Resource]) -> dict[str, dict]:
    extra: dict[str, dict] = {}
    roots = [META + "Status", META + "Patch", META + "DeleteOptions", META + "WatchEvent"]
    for r in resources:
        extra[definition_name(r)] = _kind_schema(r)
        extra[_list_definition_name(r)] = _list_schema(r)
        roots += [definition_name(r), _list_definition_name(r)]
    return _closure(roots, extra)


# ----------------------------------------------------------------------------- memoization

_lock = threading.Lock()
_cache: dict[tuple, tuple[list[Resource], Any]] = {}
_CACHE_MAX = 64


def _state(registry: Registry) -> tuple[list[Resource], tuple]:
    rs = sorted(registry.all(), key=lambda r: (r.group, r.version, r.plural))
    return rs, tuple((r.group, r.version, r.plural, id(r)) for r in rs)


def _memo(kind: str, registry: Registry, extra: tuple, build):
    rs, sig = _state(registry)
    key = (kind, sig, extra)
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit[1]
    value = build(rs)
    with _lock:
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[key] = (rs, value)  # keeping `rs` alive keeps the id()s in the key unique
    return value


# ----------------------------------------------------------------------------- documents

_INFO = {"title": "Kubernetes", "version": "v1.36.0-residency"}


def v2(registry: Registry) -> dict:
    """Swagger 2.0 document for every served resource."""
    def build(rs: list[Resource]) -> dict:
        return {
            "swagger": "2.0",
            "info": dict(_INFO),
            "paths": _render(_v2_paths(rs), "#/definitions/"),
            "definitions": _render(_definitions(rs), "#/definitions/"),
            "securityDefinitions": {"BearerToken": {"description": "Bearer Token authentication", "type": "apiKey",
                                                    "name": "authorization", "in": "header"}},
            "security": [{"BearerToken": []}],
        }
    return _memo("v2", registry, (), build)


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def v3_group_version(registry: Registry, group: str, version: str) -> dict | None:
    """OpenAPI 3.0 document of one group-version, or None if nothing is served there."""
    def build(rs: list[Resource]) -> dict | None:
        mine = [r for r in rs if r.group == group and r.version == version]
        if not mine:
            return None
        return {
            "openapi": "3.0.0",
            "info": dict(_INFO),
            "paths": _render(_v3_paths(mine), "#/components/schemas/"),
            "components": {
                "schemas": _render(_definitions(mine), "#/components/schemas/"),
                "securitySchemes": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication",
                                                    "name": "authorization", "in": "header"}},
            },
        }
    return _memo("v3gv", registry, (group, version), build)


def v3_hash(registry: Registry, group: str, version: str) -> str | None:
    def build(rs: list[Resource]) -> str | None:
        doc = v3_group_version(registry, group, version)
        if doc is None:
            return None
        raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
        return hashlib.sha512(raw).hexdigest().upper()
    return _memo("v3hash", registry, (group, version), build)


def v3_index(registry: Registry) -> dict:
    """`/openapi/v3`: {"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=..."}, ...}}."""
    def build(rs: list[Resource]) -> dict:
        gvs = sorted({(r.group, r.version) for r in rs})
        paths = {}
        for g, v in gvs:
            p = _gv_path(g, v)
            paths[p] = {"serverRelativeURL": f"/openapi/v3/{p}?hash={v3_hash(registry, g, v)}"}
        return {"paths": dict(sorted(paths.items()))}
    return _memo("v3index", registry, (), build)
