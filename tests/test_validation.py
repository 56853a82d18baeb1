"""machinery.validation: metadata / ConfigMap / Secret validation with upstream messages.

Messages follow k8s.io/apimachinery/pkg/util/validation (RegexError's "'a',  or 'b', "
double space included), apimachinery api/validation ObjectMeta checks and
pkg/apis/core/validation ConfigMap/Secret checks.
"""
from __future__ import annotations

import base64
import random

import pytest
from hypothesis import given, strategies as st

from machinery.errors import StatusError
from machinery.validation import (ensure_namespace_matches, generate_name, is_config_map_key,
                                  is_qualified_name, validate_name, validate_object)

SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                 "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                 "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
             "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
             "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
DNS1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
               "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
               "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")


def cm(name="cm", ns="default", **extra):
    meta = {"name": name, "namespace": ns}
    meta.update(extra.pop("meta", {}))
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, **extra}


def invalid(resource, kind, obj, *, namespaced=True, old=None, group="") -> StatusError:
    with pytest.raises(StatusError) as ei:
        validate_object(resource, kind, group, obj, namespaced=namespaced, old=old)
    assert ei.value.code == 422 and ei.value.reason == "Invalid"
    return ei.value


def test_valid_objects_pass():
    validate_object("configmaps", "ConfigMap", "", cm(data={"a.b_C-1": "x"}), namespaced=True)
    validate_object("namespaces", "Namespace", "", {"metadata": {"name": "kube-system"}}, namespaced=False)
    validate_object("clusterroles", "ClusterRole", "rbac.authorization.k8s.io",
                    {"metadata": {"name": "system:controller:foo"}}, namespaced=False)


def test_subdomain_name_message_and_status_shape():
    e = invalid("configmaps", "ConfigMap", cm("Bad_Name"))
    assert e.message == f'ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": {SUBDOMAIN_MSG}'
    st_ = e.status()
    assert st_["details"] == {"name": "Bad_Name", "kind": "ConfigMap", "causes": [
        # Causes carry upstream's ErrorBody() (no field prefix); the field is separate (NewInvalid).
        {"reason": "FieldValueInvalid", "message": f'Invalid value: "Bad_Name": {SUBDOMAIN_MSG}',
         "field": "metadata.name"}]}


def test_name_rules_per_kind():
    assert validate_name("namespaces", "a.b") == [LABEL_MSG]
    assert validate_name("services", "1abc") == [DNS1035_MSG]
    assert validate_name("pods", "a.b") == []
    assert validate_name("configmaps", "x" * 254) == ["must be no more than 253 characters"]
    assert validate_name("namespaces", "x" * 64) == ["must be no more than 63 characters"]
    assert validate_name("roles", "system:foo") == []
    assert validate_name("roles", "..") == ["may not be '..'"]
    assert validate_name("clusterrolebindings", "a/b%c") == ["may not contain '/'", "may not contain '%'"]
    # generateName prefixes may end in '-'
    assert validate_name("pods", "web-", prefix=True) == []
    assert validate_name("pods", "web-") != []


def test_group_qualified_kind_in_message():
    e = invalid("roles", "Role", {"metadata": {"name": "a/b", "namespace": "d"}},
                group="rbac.authorization.k8s.io")
    assert e.message == 'Role.rbac.authorization.k8s.io "a/b" is invalid: metadata.name: Invalid value: "a/b": ' \
                        "may not contain '/'"


def test_name_required():
    e = invalid("configmaps", "ConfigMap", cm(""))
    assert e.message == 'ConfigMap "" is invalid: metadata.name: Required value: name or generateName is required'


def test_namespace_required_and_forbidden():
    e = invalid("configmaps", "ConfigMap", cm(ns=""))
    assert e.message == 'ConfigMap "cm" is invalid: metadata.namespace: Required value'
    e = invalid("namespaces", "Namespace", {"metadata": {"name": "n", "namespace": "x"}}, namespaced=False)
    assert e.message.endswith("metadata.namespace: Forbidden: not allowed on this type")


def test_ensure_namespace_matches():
    o = {"metadata": {"name": "a"}}
    ensure_namespace_matches(o, "ns1", True)
    assert o["metadata"]["namespace"] == "ns1"
    o = {"metadata": {"name": "a", "namespace": "x"}}
    ensure_namespace_matches(o, "", False)
    assert "namespace" not in o["metadata"]
    with pytest.raises(StatusError) as ei:
        ensure_namespace_matches({"metadata": {"namespace": "other"}}, "ns1", True)
    assert (ei.value.code, ei.value.reason, ei.value.message) == (
        400, "BadRequest", "the namespace of the provided object does not match the namespace sent on the request")


def test_labels_and_annotations():
    e = invalid("configmaps", "ConfigMap", cm(meta={"labels": {"ok": "bad value"}}))
    assert e.message == (
        'ConfigMap "cm" is invalid: metadata.labels: Invalid value: "bad value": a valid label must be an empty '
        "string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
        "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is "
        "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
    e = invalid("configmaps", "ConfigMap", cm(meta={"labels": {"/x": "v"}}))
    assert 'metadata.labels: Invalid value: "/x": prefix part must be non-empty' in e.message
    # annotation keys are case-insensitive qualified names
    validate_object("configmaps", "ConfigMap", "", cm(meta={"annotations": {"Example.COM/Key": "v"}}),
                    namespaced=True)
    e = invalid("configmaps", "ConfigMap", cm(meta={"annotations": {"a": "x" * (256 * 1024)}}))
    assert e.message == 'ConfigMap "cm" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes'


def test_qualified_name_messages():
    assert is_qualified_name("a/b/c")[0].startswith("a qualified name must consist of alphanumeric characters")
    assert is_qualified_name("x" * 64) == ["name part must be no more than 63 characters"]
    assert is_qualified_name("example.com/") == [
        "name part must be non-empty",
        "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
        "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
        "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"]


def test_owner_references_and_finalizers_and_generation():
    e = invalid("configmaps", "ConfigMap", cm(meta={"ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
                                                                         "name": "p"}]}))
    assert e.message.endswith('metadata.ownerReferences.uid: Invalid value: "": uid must not be empty')
    e = invalid("configmaps", "ConfigMap", cm(meta={"finalizers": ["bad finalizer"]}))
    assert 'metadata.finalizers: Invalid value: "bad finalizer"' in e.message
    e = invalid("configmaps", "ConfigMap", cm(meta={"generation": -1}))
    assert e.message.endswith("metadata.generation: Invalid value: -1: must be greater than or equal to 0")


def test_configmap_keys_and_size():
    assert is_config_map_key("..a") == ["must not start with '..'"]
    assert is_config_map_key(".") == ["must not be '.'"]
    e = invalid("configmaps", "ConfigMap", cm(data={"a b": "1"}))
    assert e.message.startswith('ConfigMap "cm" is invalid: data[a b]: Invalid value: "a b": a valid config key '
                                "must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
                                "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')")
    e = invalid("configmaps", "ConfigMap", cm(data={"a": "x" * (1024 * 1024 + 1)}))
    assert e.message == 'ConfigMap "cm" is invalid: []: Too long: may not be more than 1048576 bytes'
    e = invalid("configmaps", "ConfigMap", cm(data={"a": "1"}, binaryData={"a": "MQ=="}))
    assert 'data[a]: Invalid value: "a": duplicate of key present in binaryData' in e.message


def test_secret_size_counts_decoded_bytes():
    big = base64.b64encode(b"x" * (1024 * 1024)).decode()
    validate_object("secrets", "Secret", "", {"metadata": {"name": "s", "namespace": "d"}, "data": {"k": big}},
                    namespaced=True)
    big2 = base64.b64encode(b"x" * (1024 * 1024 + 1)).decode()
    e = invalid("secrets", "Secret", {"metadata": {"name": "s", "namespace": "d"}, "data": {"k": big2}})
    assert e.message == 'Secret "s" is invalid: data: Too long: may not be more than 1048576 bytes'


def test_immutable_configmap_and_secret():
    old = cm(data={"a": "1"}, immutable=True)
    validate_object("configmaps", "ConfigMap", "", cm(data={"a": "1"}, immutable=True,
                                                      meta={"labels": {"x": "y"}}), namespaced=True, old=old)
    e = invalid("configmaps", "ConfigMap", cm(data={"a": "2"}, immutable=True), old=old)
    assert e.message == 'ConfigMap "cm" is invalid: data: Forbidden: field is immutable when `immutable` is set'
    e = invalid("configmaps", "ConfigMap", cm(data={"a": "1"}), old=old)
    assert e.message == 'ConfigMap "cm" is invalid: immutable: Forbidden: field is immutable when `immutable` is set'
    olds = {"metadata": {"name": "s", "namespace": "d"}, "type": "Opaque", "data": {"a": "MQ=="}, "immutable": True}
    e = invalid("secrets", "Secret", {**olds, "data": {}}, old=olds)
    assert e.message.endswith("data: Forbidden: field is immutable when `immutable` is set")
    e = invalid("secrets", "Secret", {**olds, "type": "kubernetes.io/tls"}, old=olds)
    assert 'type: Invalid value: "kubernetes.io/tls": field is immutable' in e.message


def test_update_metadata_immutability_and_finalizers_while_deleting():
    old = cm(meta={"uid": "u1", "deletionTimestamp": "2024-01-01T00:00:00Z", "finalizers": ["a.io/x"]})
    new = cm(meta={"uid": "u1", "finalizers": ["a.io/x", "b.io/y"]})
    e = invalid("configmaps", "ConfigMap", new, old=old)
    assert e.message.endswith('metadata.finalizers: Forbidden: no new finalizers can be added if the object is '
                              'being deleted, found new finalizers []string{"b.io/y"}')
    e = invalid("configmaps", "ConfigMap", cm(meta={"uid": "u2"}), old=cm(meta={"uid": "u1"}))
    assert e.message.endswith('metadata.uid: Invalid value: "u2": field is immutable')


def test_multiple_errors_are_bracketed():
    e = invalid("configmaps", "ConfigMap", cm("A", ns="", data={"?": "1"}))
    assert e.message.startswith('ConfigMap "A" is invalid: [metadata.name: Invalid value: "A": ')
    assert len(e.details["causes"]) == 3 and e.message.endswith("]")


def test_generate_name():
    name = generate_name("web-", random.Random(1))
    assert name.startswith("web-") and len(name) == 9
    assert set(name[4:]) <= set("bcdfghjklmnpqrstvwxz2456789")
    long = generate_name("x" * 100)
    assert len(long) == 63 and long.startswith("x" * 58)


@given(st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True))
def test_generated_names_from_valid_prefixes_are_valid(prefix):
    assert validate_name("pods", prefix + "-", prefix=True) == []
    assert validate_name("pods", generate_name(prefix + "-")) == []


def test_field_error_body_renders_values_as_upstream():
    # field.Error.ErrorBody: %q for strings, %v for numbers and bools, json.Marshal for the rest
    from machinery.errors import field_error
    msg = lambda v: field_error("FieldValueInvalid", "f", "d", v)["message"]  # noqa: E731
    assert msg("\u00e9\x01<&>") == 'Invalid value: "\u00e9\\x01<&>": d'
    assert msg(["a", "<b>"]) == 'Invalid value: ["a","\\u003cb\\u003e"]: d'
    assert (msg(1.0), msg(-3), msg(True)) == ("Invalid value: 1: d", "Invalid value: -3: d", "Invalid value: true: d")
