"""Object-metadata validation for create/update (pure code, no IO).

Re-implements (nothing copied) the checks and message texts of
k8s.io/apimachinery/pkg/util/validation (IsDNS1123Subdomain, IsDNS1123Label, IsDNS1035Label,
IsQualifiedName, IsValidLabelValue, IsConfigMapKey), k8s.io/apimachinery/pkg/api/validation
(ValidateObjectMeta[Update], ValidateAnnotations, owner references, finalizers),
k8s.io/apimachinery/pkg/api/validation/path (IsValidPathSegmentName, RBAC names) and
k8s.io/kubernetes/pkg/apis/core/validation (ValidateConfigMap[Update], ValidateSecret[Update]).

Failures are 422 Invalid built with ``errors.invalid(kind, name, group, causes)``; a body
namespace that differs from the URL is 400 BadRequest (rest.EnsureObjectNamespaceMatchesRequestNamespace).
Map-valued fields (labels, annotations, data) are reported in sorted key order (Go iterates maps
randomly). Kind-specific spec validation (pod spec, service ports, secret types...) is not done here.
"""
from __future__ import annotations

import base64
import binascii
import random
import re
from typing import Any, Callable

from machinery.errors import bad_request, field_error, invalid

__all__ = [
    "validate_object", "validate_name", "generate_name", "ensure_namespace_matches",
    "is_dns1123_subdomain", "is_dns1123_label", "is_dns1035_label", "is_qualified_name",
    "is_valid_label_value", "is_config_map_key", "is_valid_path_segment_name",
    "TOTAL_ANNOTATION_SIZE_LIMIT", "MAX_SECRET_SIZE",
]

TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024   # apimachinery TotalAnnotationSizeLimitB
MAX_SECRET_SIZE = 1024 * 1024              # core.MaxSecretSize (ConfigMaps use it too)
FIELD_IMMUTABLE = "field is immutable"
IMMUTABLE_SET = "field is immutable when `immutable` is set"

# --------------------------------------------------------------------------- string checks

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                      "and must start and end with an alphanumeric character")
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                          "'-' or '.', and must start and end with an alphanumeric character")
_DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1035_LABEL_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                      "start with an alphabetic character, and end with an alphanumeric character")
_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', "
                       "and must start and end with an alphanumeric character")
_LABEL_VALUE_FMT = "(" + _QUALIFIED_NAME_FMT + ")?"
_LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, "
                    "'-', '_' or '.', and must start and end with an alphanumeric character")
_CONFIG_MAP_KEY_FMT = "[-._a-zA-Z0-9]+"
_CONFIG_MAP_KEY_MSG = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    # upstream joins "'ex', " pieces with " or ", hence the double space: "'a',  or 'b', "
    ex = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {ex}regex used for validation is '{fmt}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def _full(fmt: str, value: str) -> bool:
    return re.fullmatch(fmt, value) is not None


def _length_and_format(value: str, max_len: int, fmt: str, msg: str, *examples: str) -> list[str]:
    """The shape of apimachinery's string validators: a length limit, then the format."""
    errs = []
    if len(value) > max_len:
        errs.append(_max_len(max_len))
    if not _full(fmt, value):
        errs.append(_regex_error(msg, fmt, *examples))
    return errs


def is_dns1123_label(value: str) -> list[str]:
    return _length_and_format(value, 63, _DNS1123_LABEL_FMT, _DNS1123_LABEL_MSG, "my-name", "123-abc")


def is_dns1123_subdomain(value: str) -> list[str]:
    return _length_and_format(value, 253, _DNS1123_SUBDOMAIN_FMT, _DNS1123_SUBDOMAIN_MSG, "example.com")


def is_dns1035_label(value: str) -> list[str]:
    return _length_and_format(value, 63, _DNS1035_LABEL_FMT, _DNS1035_LABEL_MSG, "my-name", "abc-123")


def is_qualified_name(value: str) -> list[str]:
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in is_dns1123_subdomain(prefix))
    else:
        return ["a qualified name " + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT,
                                                   "MyName", "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + _max_len(63))
    if not _full(_QUALIFIED_NAME_FMT, name):
        errs.append("name part " + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT,
                                                "MyName", "my.name", "123-abc"))
    return errs


def is_valid_label_value(value: str) -> list[str]:
    return _length_and_format(value, 63, _LABEL_VALUE_FMT, _LABEL_VALUE_MSG, "MyValue", "my_value", "12345")


def is_config_map_key(value: str) -> list[str]:
    errs = _length_and_format(value, 253, _CONFIG_MAP_KEY_FMT, _CONFIG_MAP_KEY_MSG, "key.name", "KEY_NAME", "key-name")
    if value == ".":
        errs.append("must not be '.'")
    elif value == "..":
        errs.append("must not be '..'")
    elif value.startswith(".."):
        errs.append("must not start with '..'")
    return errs


def is_valid_path_segment_name(value: str) -> list[str]:
    for bad in (".", ".."):
        if value == bad:
            return [f"may not be '{bad}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in value]


# --------------------------------------------------------------------------- names

def _mask_trailing_dash(name: str) -> str:
    # upstream quirk: drops the last two characters and appends 'a'
    if len(name) > 1 and name.endswith("-"):
        return name[:-2] + "a"
    return name


_NAME_RULES = {
    "namespaces": is_dns1123_label,      # ValidateNamespaceName = NameIsDNSLabel
    "services": is_dns1035_label,        # ValidateServiceName = NameIsDNS1035Label
    "roles": is_valid_path_segment_name,  # rbac ValidateRBACName = path.IsValidPathSegmentName
    "rolebindings": is_valid_path_segment_name,
    "clusterroles": is_valid_path_segment_name,
    "clusterrolebindings": is_valid_path_segment_name,
}


def _name_fn(resource: str):
    return _NAME_RULES.get(resource, is_dns1123_subdomain)  # everything else: NameIsDNSSubdomain


def validate_name(resource: str, name: str, prefix: bool = False) -> list[str]:
    """Error strings for ``name`` as a name of ``resource`` (plural); [] if valid.

    ``prefix=True`` validates a generateName (a trailing '-' is allowed); path-segment
    (RBAC) names have no prefix handling upstream.
    """
    fn = _name_fn(resource)
    if prefix and fn is not is_valid_path_segment_name:
        name = _mask_trailing_dash(name)
    return fn(name)


_GEN_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # utilrand alphanums (no vowels, no 0/1/3)
_MAX_GENERATED_PREFIX = 63 - 5


def generate_name(prefix: str, rng: random.Random | None = None) -> str:
    """names.SimpleNameGenerator: prefix truncated to 58 chars + 5 random characters."""
    r = rng or random.SystemRandom()
    return prefix[:_MAX_GENERATED_PREFIX] + "".join(r.choice(_GEN_ALPHABET) for _ in range(5))


# --------------------------------------------------------------------------- namespace

def ensure_namespace_matches(obj: dict, request_namespace: str, namespaced: bool) -> None:
    """rest.EnsureObjectNamespaceMatchesRequestNamespace (mutates ``obj``).

    Empty body namespace takes the request's; cluster-scoped objects get it cleared; a
    mismatch is 400 BadRequest.
    """
    meta = obj.setdefault("metadata", {})
    want = request_namespace if namespaced else ""
    have = meta.get("namespace") or ""
    if have == want:
        return
    if not have:
        meta["namespace"] = want
        return
    if not want:
        meta.pop("namespace", None)
        return
    raise bad_request("the namespace of the provided object does not match the namespace sent on the request")


# --------------------------------------------------------------------------- metadata

def _inv(field: str, value: Any, detail: str) -> dict[str, str]:
    return field_error("FieldValueInvalid", field, detail, value)


def _string_map(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _meta_errors(resource: str, meta: dict, namespaced: bool) -> list[dict[str, str]]:
    causes: list[dict[str, str]] = []
    gen = meta.get("generateName") or ""
    name = meta.get("name") or ""
    if gen:
        causes += [_inv("metadata.generateName", gen, m) for m in validate_name(resource, gen, prefix=True)]
    if not name:
        causes.append(field_error("FieldValueRequired", "metadata.name", "name or generateName is required"))
    else:
        causes += [_inv("metadata.name", name, m) for m in validate_name(resource, name)]
    ns = meta.get("namespace") or ""
    if namespaced:
        if not ns:
            causes.append(field_error("FieldValueRequired", "metadata.namespace", ""))
        else:
            causes += [_inv("metadata.namespace", ns, m) for m in is_dns1123_label(ns)]
    elif ns:
        causes.append(field_error("FieldValueForbidden", "metadata.namespace", "not allowed on this type"))

    generation = meta.get("generation")
    if isinstance(generation, (int, float)) and not isinstance(generation, bool) and generation < 0:
        causes.append(_inv("metadata.generation", generation, "must be greater than or equal to 0"))

    labels = _string_map(meta.get("labels"))
    for k in sorted(labels):
        causes += [_inv("metadata.labels", k, m) for m in is_qualified_name(k)]
        v = labels[k] if isinstance(labels[k], str) else str(labels[k])
        causes += [_inv("metadata.labels", v, m) for m in is_valid_label_value(v)]

    annotations = _string_map(meta.get("annotations"))
    for k in sorted(annotations):
        causes += [_inv("metadata.annotations", k, m) for m in is_qualified_name(k.lower())]
    size = sum(len(k.encode()) + len(str(v or "").encode()) for k, v in annotations.items())
    if size > TOTAL_ANNOTATION_SIZE_LIMIT:
        causes.append(field_error("FieldValueTooLong", "metadata.annotations",
                                  f"may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"))

    for ref in meta.get("ownerReferences") or []:
        if not isinstance(ref, dict):
            continue
        api_version = ref.get("apiVersion") or ""
        version = api_version.rsplit("/", 1)[-1] if api_version else ""
        if not version:
            causes.append(_inv("metadata.ownerReferences.apiVersion", api_version, "version must not be empty"))
        if not ref.get("kind"):
            causes.append(_inv("metadata.ownerReferences.kind", ref.get("kind") or "", "kind must not be empty"))
        if not ref.get("name"):
            causes.append(_inv("metadata.ownerReferences.name", ref.get("name") or "", "name must not be empty"))
        if not ref.get("uid"):
            causes.append(_inv("metadata.ownerReferences.uid", ref.get("uid") or "", "uid must not be empty"))

    finalizers = meta.get("finalizers") or []
    for f in finalizers:
        if isinstance(f, str):
            causes += [_inv("metadata.finalizers", f, m) for m in is_qualified_name(f)]
    if "orphan" in finalizers and "foregroundDeletion" in finalizers:
        causes.append(_inv("metadata.finalizers", finalizers,
                           "finalizer orphan and foregroundDeletion cannot be both set"))
    return causes


def _meta_update_errors(meta: dict, old_meta: dict) -> list[dict[str, str]]:
    causes: list[dict[str, str]] = []
    if old_meta.get("deletionTimestamp"):
        old_f = set(old_meta.get("finalizers") or [])
        extra = sorted(f for f in set(meta.get("finalizers") or []) if f not in old_f)
        if extra:
            go = "[]string{" + ", ".join(f'"{f}"' for f in extra) + "}"
            causes.append(field_error("FieldValueForbidden", "metadata.finalizers",
                                      f"no new finalizers can be added if the object is being deleted, "
                                      f"found new finalizers {go}"))
    for f in ("name", "namespace", "uid"):
        new_v, old_v = meta.get(f) or "", old_meta.get(f) or ""
        if f == "uid" and not new_v:
            continue  # BeforeUpdate copies the old UID when none is given
        if new_v != old_v:
            causes.append(_inv(f"metadata.{f}", new_v, FIELD_IMMUTABLE))
    return causes


# --------------------------------------------------------------------------- kind-specific

def _secret_value_len(v: Any) -> int:
    if not isinstance(v, str):
        return 0
    try:
        return len(base64.b64decode(v, validate=True))
    except (binascii.Error, ValueError):
        return len(v)


def _configmap_errors(obj: dict) -> list[dict[str, str]]:
    data, binary = _string_map(obj.get("data")), _string_map(obj.get("binaryData"))
    causes, total = _keys_and_size("data", data, lambda v: len(str(v or "").encode()), binary)
    more, binary_total = _keys_and_size("binaryData", binary, _secret_value_len)
    causes += more
    total += binary_total
    if total > MAX_SECRET_SIZE:
        # field.TooLong(field.NewPath(""), cfg, MaxSecretSize): an empty path prints as "[]"
        causes.append(field_error("FieldValueTooLong", "[]", f"may not be more than {MAX_SECRET_SIZE} bytes"))
    return causes


def _keys_and_size(field: str, m: dict, size: Callable[[Any], int],
                   binary: dict | None = None) -> tuple[list[dict[str, str]], int]:
    """Key errors of a data map in key order (with `binary`: keys it repeats) and its total size."""
    causes: list[dict[str, str]] = []
    total = 0
    for k in sorted(m):
        causes += [_inv(f"{field}[{k}]", k, msg) for msg in is_config_map_key(k)]
        if binary is not None and k in binary:
            causes.append(_inv(f"{field}[{k}]", k, "duplicate of key present in binaryData"))
        total += size(m[k])
    return causes, total


def _secret_errors(obj: dict) -> list[dict[str, str]]:
    causes, total = _keys_and_size("data", _string_map(obj.get("data")), _secret_value_len)
    if total > MAX_SECRET_SIZE:
        causes.append(field_error("FieldValueTooLong", "data", f"may not be more than {MAX_SECRET_SIZE} bytes"))
    return causes


def _immutable_errors(resource: str, obj: dict, old: dict) -> list[dict[str, str]]:
    causes: list[dict[str, str]] = []
    if resource == "secrets":
        new_t, old_t = obj.get("type") or "Opaque", old.get("type") or "Opaque"
        if new_t != old_t:
            causes.append(_inv("type", new_t, FIELD_IMMUTABLE))
    if old.get("immutable") is True:
        if obj.get("immutable") is not True:
            causes.append(field_error("FieldValueForbidden", "immutable", IMMUTABLE_SET))
        fields = ("data", "binaryData") if resource == "configmaps" else ("data",)
        for f in fields:
            if (obj.get(f) or {}) != (old.get(f) or {}):
                causes.append(field_error("FieldValueForbidden", f, IMMUTABLE_SET))
    return causes


POD_SPEC_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)")


def _pod_spec_update_errors(obj: dict, old: dict) -> list[dict[str, str]]:
    """Pod specs are immutable but for a few fields (upstream ValidatePodUpdate).

    The diff upstream appends to the message is omitted.
    """
    new_spec, old_spec = obj.get("spec") or {}, old.get("spec") or {}
    if new_spec == old_spec:
        return []

    def masked(spec: dict, tolerations) -> dict:
        m = dict(spec)
        for f in ("containers", "initContainers"):
            if isinstance(m.get(f), list):
                m[f] = [{k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
                        for c in m[f]]
        for f in ("activeDeadlineSeconds", "terminationGracePeriodSeconds"):
            m.pop(f, None)
        m["tolerations"] = tolerations
        return m
    old_tol = old_spec.get("tolerations") or []
    new_tol = new_spec.get("tolerations") or []
    additions_only = new_tol[:len(old_tol)] == old_tol
    if masked(new_spec, None if additions_only else new_tol) == masked(old_spec, None if additions_only else old_tol):
        return []
    return [field_error("FieldValueForbidden", "spec", POD_SPEC_UPDATE_FORBIDDEN)]


# --------------------------------------------------------------------------- entry point

def validate_object(resource: str, kind: str, group: str, obj: dict, *, namespaced: bool,
                    old: dict | None = None) -> None:
    """Validate ``obj`` for create (``old is None``) or update; raise 422 Invalid on failure.

    Call after generateName has been resolved into metadata.name (upstream validates the
    generated name) and after ``ensure_namespace_matches``.
    """
    meta = _string_map(obj.get("metadata"))
    causes: list[dict[str, str]] = []
    if old is not None:
        causes += _meta_update_errors(meta, _string_map(old.get("metadata")))
        if resource in ("configmaps", "secrets"):
            causes += _immutable_errors(resource, obj, old)
        elif resource == "pods":
            causes += _pod_spec_update_errors(obj, old)
    causes += _meta_errors(resource, meta, namespaced)
    if resource == "configmaps":
        causes += _configmap_errors(obj)
    elif resource == "secrets":
        causes += _secret_errors(obj)
    if causes:
        raise invalid(kind, meta.get("name") or "", group, causes)
