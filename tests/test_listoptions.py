"""ListOptions decoding, defaulting (S5.2) and validation (S1.2-S1.11, S5.3)."""
import pytest

from machinery.errors import StatusError
from machinery.listoptions import (ListOptions, parse_list_options, parse_query_bool,
                                   parse_resource_version)
from machinery.selectors import field_selectors_for


def invalid(query, watch=False, **kw):
    with pytest.raises(StatusError) as ei:
        parse_list_options(query, watch=watch, **kw)
    e = ei.value
    assert e.code == 422 and e.reason == "Invalid"
    return e


def test_s1_2_status_shape():
    """S1.2: 422 Invalid, group meta.k8s.io, kind ListOptions, no name, one cause per error."""
    e = invalid({"resourceVersionMatch": "Exact"})
    st = e.status()
    assert st["message"] == ('ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
                             'resourceVersionMatch is forbidden unless resourceVersion is provided')
    assert st["details"] == {"group": "meta.k8s.io", "kind": "ListOptions", "causes": [
        {"reason": "FieldValueForbidden",
         "message": "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
         "field": "resourceVersionMatch"}]}
    assert list(st) == ["kind", "apiVersion", "metadata", "status", "message", "reason", "details", "code"]


def test_s1_3_s1_4_s1_5_several_errors_joined():
    e = invalid({"resourceVersionMatch": "Bogus", "continue": "x"})
    assert e.message == (
        'ListOptions.meta.k8s.io "" is invalid: ['
        'resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided, '
        'resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided, '
        'resourceVersionMatch: Unsupported value: "Bogus": supported values: "Exact", "NotOlderThan", ""]')
    assert [c["reason"] for c in e.details["causes"]] == [
        "FieldValueForbidden", "FieldValueForbidden", "FieldValueNotSupported"]


def test_s1_6_exact_with_rv0():
    e = invalid({"resourceVersionMatch": "Exact", "resourceVersion": "0"})
    assert e.message.endswith('resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden '
                              'for resourceVersion "0"')


@pytest.mark.parametrize("val", ["true", "false", ""])
def test_s1_7_send_initial_events_on_list(val):
    e = invalid({"sendInitialEvents": val})
    assert e.message == ('ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: '
                         'sendInitialEvents is forbidden for list')
    assert e.details["causes"][0]["field"] == "sendInitialEvents"


def test_s1_8_watch_send_initial_events_needs_not_older_than():
    e = invalid({"sendInitialEvents": "true", "resourceVersion": "5"}, watch=True)
    assert e.message.endswith("resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
                              "resourceVersionMatch to NotOlderThan")


def test_s1_9_watch_rvm_rules():
    e = invalid({"resourceVersionMatch": "Exact", "resourceVersion": "5", "continue": "c"}, watch=True)
    assert e.message == (
        'ListOptions.meta.k8s.io "" is invalid: ['
        'resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided, '
        'resourceVersionMatch: Unsupported value: "Exact": supported values: "NotOlderThan", '
        'resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided]')


def test_s1_10_limit_continue_ignored_on_watch_bookmarks_on_list():
    o = parse_list_options({"limit": "5", "continue": "x", "resourceVersion": "7"}, watch=True)
    assert o.limit == 5 and o.continue_ == "x" and o.send_initial_events is None
    o = parse_list_options({"allowWatchBookmarks": "true"}, watch=False)
    assert o.allow_watch_bookmarks and not o.watch


@pytest.mark.parametrize("rv", [None, "", "0"])
def test_s5_2_watch_defaulting(rv):
    q = {} if rv is None else {"resourceVersion": rv}
    o = parse_list_options(q, watch=True)
    assert o.send_initial_events is True and o.resource_version_match == "NotOlderThan"
    assert o.resource_version == rv


def test_s5_2_no_defaulting_cases():
    assert parse_list_options({"resourceVersion": "9"}, watch=True).send_initial_events is None
    o = parse_list_options({"sendInitialEvents": "false", "resourceVersionMatch": "NotOlderThan"}, watch=True)
    assert o.send_initial_events is False
    assert parse_list_options({}, watch=False).send_initial_events is None
    o = parse_list_options({}, watch=True, watch_list_enabled=False)
    assert o.send_initial_events is None and o.resource_version_match == ""


def test_watch_query_flag_turns_on_watch():
    assert parse_list_options({"watch": "1"}, watch=False).watch
    assert parse_list_options({"watch": "true"}, watch=False).send_initial_events is True
    assert not parse_list_options({"watch": "false"}, watch=False).watch


def test_s5_3_gate_off():
    e = invalid({"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}, watch=True,
                watch_list_enabled=False)
    assert e.message == ('ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: '
                         'sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled')


def test_s5_1_canonical_watch_list_request():
    o = parse_list_options({"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan",
                            "allowWatchBookmarks": "true", "resourceVersion": "", "timeoutSeconds": "300"},
                           watch=True)
    assert (o.send_initial_events, o.allow_watch_bookmarks, o.timeout_seconds) == (True, True, 300)


@pytest.mark.parametrize("v,want", [("1", True), ("t", True), ("TRUE", True), ("True", True), ("yes", True),
                                    ("", True), ("0", False), ("false", False), ("FaLsE", False), (None, False)])
def test_bools_decoded_like_upstream_convert_slice_string_to_bool(v, want):
    assert parse_query_bool(v) is want


@pytest.mark.parametrize("q,msg", [
    ({"limit": "abc"}, 'strconv.ParseInt: parsing "abc": invalid syntax'),
    ({"limit": ""}, 'strconv.ParseInt: parsing "": invalid syntax'),
    ({"limit": "99999999999999999999"}, 'strconv.ParseInt: parsing "99999999999999999999": value out of range'),
    ({"timeoutSeconds": "1.5"}, 'strconv.ParseInt: parsing "1.5": invalid syntax'),
    ({"labelSelector": "a b"}, "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
    ({"fieldSelector": "nope"}, "invalid selector: 'nope'; can't understand 'nope'"),
])
def test_decode_errors_are_400(q, msg):
    with pytest.raises(StatusError) as ei:
        parse_list_options(q, watch=False)
    assert (ei.value.code, ei.value.reason, ei.value.message) == (400, "BadRequest", msg)


def test_decode_errors_come_before_validation():
    with pytest.raises(StatusError) as ei:
        parse_list_options({"limit": "x", "sendInitialEvents": "true"}, watch=False)
    assert ei.value.code == 400


def test_ints_and_selectors_parsed():
    o = parse_list_options({"limit": "+007", "labelSelector": "a=b", "fieldSelector": "metadata.name=x",
                            "shardSelector": "s"}, watch=False, field_selectors=field_selectors_for("configmaps"))
    assert o.limit == 7 and o.labels.matches({"a": "b"}) and o.fields.exact_name() == "x"
    assert o.shard_selector == "s" and o.label_selector == "a=b"
    with pytest.raises(StatusError) as ei:
        parse_list_options({"fieldSelector": "spec.x=1"}, watch=False, field_selectors=field_selectors_for("pods"))
    assert ei.value.message == "field label not supported: spec.x"


def test_default_dataclass():
    o = ListOptions()
    assert o.resource_version is None and o.limit == 0 and o.send_initial_events is None


@pytest.mark.parametrize("rv,want", [(None, 0), ("", 0), ("0", 0), ("42", 42), ("007", 7),
                                     ("18446744073709551615", 2**64 - 1)])
def test_s1_1_parse_resource_version(rv, want):
    assert parse_resource_version(rv) == want


@pytest.mark.parametrize("rv,tail", [
    ("abc", 'strconv.ParseUint: parsing "abc": invalid syntax'),
    ("-1", 'strconv.ParseUint: parsing "-1": invalid syntax'),
    ("+1", 'strconv.ParseUint: parsing "+1": invalid syntax'),
    ("18446744073709551616", 'strconv.ParseUint: parsing "18446744073709551616": value out of range'),
])
def test_s1_11_bad_resource_version(rv, tail):
    with pytest.raises(StatusError) as ei:
        parse_resource_version(rv)
    assert ei.value.code == 400 and ei.value.reason == "BadRequest"
    assert ei.value.message == f'invalid resource version: resourceVersion: Invalid value: "{rv}": {tail}'
