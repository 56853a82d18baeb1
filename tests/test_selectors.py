"""Label/field selectors (apimachinery labels.Parse, fields.ParseSelector); S1.20 exact name."""
import pytest
from hypothesis import given, strategies as st

from machinery.errors import StatusError
from machinery.selectors import (FIELD_SELECTORS, field_selectors_for, parse_field_selector,
                                 parse_label_selector)

QNAME_REGEX_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                   "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
                   "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
VALUE_REGEX_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
                   "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
                   "'my_value',  or '12345', regex used for validation is "
                   "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")


def bad(fn, *a):
    with pytest.raises(StatusError) as ei:
        fn(*a)
    assert ei.value.code == 400 and ei.value.reason == "BadRequest"
    return ei.value.message


# --- label selectors --------------------------------------------------------------

@pytest.mark.parametrize("sel,labels,want", [
    ("a=b", {"a": "b"}, True),
    ("a==b", {"a": "b"}, True),
    ("a=b", {"a": "c"}, False),
    ("a=b", {}, False),
    ("a!=b", {}, True),                 # != matches objects lacking the key
    ("a!=b", {"a": "b"}, False),
    ("a in (x,y)", {"a": "y"}, True),
    ("a in (x,y)", {}, False),
    ("a notin (x,y)", {}, True),        # notin matches objects lacking the key
    ("a notin (x,y)", {"a": "x"}, False),
    ("a", {"a": ""}, True),
    ("a", {}, False),
    ("!a", {}, True),
    ("!a", {"a": "1"}, False),
    ("a=b,c", {"a": "b", "c": "1"}, True),
    ("a=b,c", {"a": "b"}, False),
    ("  a =  b ,\tc\n", {"a": "b", "c": ""}, True),
    ("a=", {"a": ""}, True),
    ("a in ()", {"a": ""}, True),
    ("a>5", {"a": "6"}, True),
    ("a<5", {"a": "x"}, False),
    ("", {"x": "y"}, True),
])
def test_label_matches(sel, labels, want):
    assert parse_label_selector(sel).matches(labels) is want


def test_label_requirements_and_canonical_string():
    s = parse_label_selector("z notin (b,a), y==1, !x, w, v in (in,notin), u!=k")
    assert str(s) == "u!=k,v in (in,notin),w,!x,y==1,z notin (a,b)"
    assert s.requirements == [("u", "!=", ("k",)), ("v", "in", ("in", "notin")), ("w", "exists", ()),
                              ("x", "!", ()), ("y", "=", ("1",)), ("z", "notin", ("a", "b"))]
    assert not s.empty and parse_label_selector("").empty
    assert str(parse_label_selector("x in (foo,,baz),y,z notin ()")) == "x in (,baz,foo),y,z notin ()"


def test_label_qualified_keys():
    s = parse_label_selector("example.com/app=web,app.kubernetes.io/name in (a)")
    assert s.matches({"example.com/app": "web", "app.kubernetes.io/name": "a"})


@pytest.mark.parametrize("sel,msg", [
    ("component not in (x)", "unable to parse requirement: found 'not', expected: in, notin, =, ==, !=, gt, lt"),
    ("app:monolith", 'unable to parse requirement: <nil>: Invalid value: "app:monolith": name part ' + QNAME_REGEX_MSG),
    ("a=demo-{nginx}", 'unable to parse requirement: values[0][a]: Invalid value: "demo-{nginx}": ' + VALUE_REGEX_MSG),
    ("a=" + "z" * 64, 'unable to parse requirement: values[0][a]: Invalid value: "' + "z" * 64
     + '": must be no more than 63 characters'),
    ("environment>qa", "unable to parse requirement: values[0]: Invalid value: \"qa\": for 'Gt', 'Lt' operators, the value must be an integer"),
    ("a/b/c=d", 'unable to parse requirement: <nil>: Invalid value: "a/b/c": a qualified name ' + QNAME_REGEX_MSG
     + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"),
    ("a,", "found '', expected: identifier after ','"),
    ("a=b c", "found 'c', expected: ',' or 'end of string'"),
    ("(a)", "found '(', expected: !, identifier, or 'end of string'"),
    ("a in x", "unable to parse requirement: found 'x' expected: '('"),
    ("a in (x y)", "unable to parse requirement: found 'y', expected: ',' or ')'"),
    ("a in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier"),
    ("!=a", "found '!=', expected: !, identifier, or 'end of string'"),
    ("!(", "unable to parse requirement: found '(', expected: identifier"),
])
def test_label_parse_errors_are_upstream_text(sel, msg):
    assert bad(parse_label_selector, sel) == msg


def test_label_empty_name_part_lists_both_problems():
    msg = bad(parse_label_selector, "example.com/=x")
    assert msg == ('unable to parse requirement: <nil>: Invalid value: "example.com/": name part must be '
                   'non-empty; name part ' + QNAME_REGEX_MSG)


_key = st.from_regex(r"\A([a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?\.)?[a-z]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?\Z")
_key = st.builds(lambda p, n: (p + "/" + n) if p else n,
                 st.one_of(st.just(""), st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,6}[a-z0-9])?(\.[a-z0-9]{1,4})?\Z")),
                 st.from_regex(r"\A[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?\Z"))
_val = st.from_regex(r"\A(([A-Za-z0-9][-A-Za-z0-9_.]{0,10})?[A-Za-z0-9])?\Z")
_req = st.one_of(
    st.builds(lambda k, op, v: f"{k}{op}{v}", _key, st.sampled_from(["=", "==", "!="]), _val),
    # upstream itself rejects some odd spellings such as "(,,)", so build value
    # lists the way String() writes them (sorted, unique)
    st.builds(lambda k, op, vs: f"{k} {op} ({','.join(sorted(set(vs)))})", _key,
              st.sampled_from(["in", "notin"]), st.lists(_val, min_size=1, max_size=4)),
    st.builds(lambda k, neg: ("!" if neg else "") + k, _key, st.booleans()),
)


@given(st.lists(_req, max_size=5))
def test_label_str_parse_roundtrip(reqs):
    """str(parse(s)) is canonical: parsing it again yields the same selector."""
    s = parse_label_selector(",".join(reqs))
    again = parse_label_selector(str(s))
    assert again == s and str(again) == str(s)


@given(st.lists(_req, min_size=1, max_size=4),
       st.dictionaries(st.sampled_from(["a", "b", "x.io/c"]), _val, max_size=3))
def test_label_canonical_form_matches_same_sets(reqs, labels):
    s = parse_label_selector(",".join(reqs))
    assert parse_label_selector(str(s)).matches(labels) == s.matches(labels)


# --- field selectors ------------------------------------------------------------------

POD = {"metadata": {"name": "p1", "namespace": "ns"}, "spec": {"nodeName": "n1"},
       "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}]}}


def test_field_basic_ops_and_exact_name():
    """S1.20: exact_name() narrows a list to one key when metadata.name= is pinned."""
    pods = FIELD_SELECTORS["pods"]
    s = parse_field_selector("metadata.name=p1,spec.nodeName==n1,status.phase!=Failed", pods)
    assert s.matches(POD) and s.exact_name() == "p1"
    assert s.requirements == [("metadata.name", "=", "p1"), ("spec.nodeName", "=", "n1"),
                              ("status.phase", "!=", "Failed")]
    assert parse_field_selector("metadata.name!=p1", pods).exact_name() is None
    assert not parse_field_selector("status.podIP=10.0.0.1,spec.hostNetwork=false", pods).matches({}) \
        and parse_field_selector("status.podIP=10.0.0.1,spec.hostNetwork=false", pods).matches(POD)
    assert parse_field_selector("", pods).empty and parse_field_selector("", pods).matches(POD)


def test_field_missing_reads_empty_and_bools():
    pods = FIELD_SELECTORS["pods"]
    assert parse_field_selector("spec.nodeName=", pods).matches({"metadata": {"name": "x"}})
    assert parse_field_selector("spec.hostNetwork=true", pods).matches({"spec": {"hostNetwork": True}})
    nodes = FIELD_SELECTORS["nodes"]
    assert parse_field_selector("spec.unschedulable=false", nodes).matches({"spec": {}})


def test_field_cluster_scoped_namespace_reads_empty():
    crs = FIELD_SELECTORS["clusterroles"]
    assert parse_field_selector("metadata.namespace=", crs).matches({"metadata": {"name": "a"}})
    assert not parse_field_selector("metadata.namespace=x", crs).matches({"metadata": {"name": "a"}})


def test_field_escapes():
    cms = FIELD_SELECTORS["configmaps"]
    s = parse_field_selector(r"metadata.name=a\,b\=c\\d", cms)
    assert s.matches({"metadata": {"name": "a,b=c\\d"}})
    assert str(s) == r"metadata.name=a\,b\=c\\d"


@pytest.mark.parametrize("sel,msg", [
    ("metadata.name", "invalid selector: 'metadata.name'; can't understand 'metadata.name'"),
    (r"metadata.name=a\x", r"invalid field selector: invalid escape sequence: \x"),
    ("metadata.name=a\\", "invalid field selector: invalid escape sequence: \\"),
    ("metadata.name=a=b", "invalid field selector: unescaped character in value: 61"),
])
def test_field_parse_errors(sel, msg):
    assert bad(parse_field_selector, sel, FIELD_SELECTORS["configmaps"]) == msg


@pytest.mark.parametrize("resource,sel,msg", [
    ("events", "message=whatever", "field label not supported: message"),
    ("pods", "spec.foo=x", "field label not supported: spec.foo"),
    ("nodes", "metadata.namespace=x", "field label not supported: metadata.namespace"),
    ("configmaps", "foo.bar=baz",
     '"foo.bar" is not a known field selector: only "metadata.name", "metadata.namespace"'),
    ("widgets", "spec.x=1",
     '"spec.x" is not a known field selector: only "metadata.name", "metadata.namespace"'),
])
def test_field_unsupported_label_messages(resource, sel, msg):
    assert bad(parse_field_selector, sel, field_selectors_for(resource)) == msg


def test_field_selectors_table_has_required_kinds():
    for r in ["namespaces", "configmaps", "secrets", "pods", "nodes", "services", "serviceaccounts",
              "events", "leases", "roles", "rolebindings", "clusterroles", "clusterrolebindings",
              "customresourcedefinitions"]:
        assert "metadata.name" in FIELD_SELECTORS[r]
    assert "type" in FIELD_SELECTORS["secrets"]
    ev = {"source": {}, "reportingComponent": "kubelet", "involvedObject": {"kind": "Pod"}}
    assert parse_field_selector("source=kubelet,involvedObject.kind=Pod", FIELD_SELECTORS["events"]).matches(ev)
