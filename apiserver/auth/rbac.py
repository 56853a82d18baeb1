"""The RBAC authorizer over compact indexes, maintained from the RBAC objects' list+watch events.

Decisions follow upstream's authorizer (k8s.io/kubernetes plugin/pkg/auth/authorizer/rbac/rbac.go, the rule
resolver in pkg/registry/rbac/validation/rule.go, the matchers in pkg/apis/rbac/v1/evaluation_helpers.go):

* a request is allowed when some rule of a role bound to the user allows it, denied otherwise (upstream's
  NoOpinion, the reason empty unless a binding that applies to the user names a role that does not exist:
  then ``RBAC: role.rbac.authorization.k8s.io "x" not found``, upstream's aggregated error text);
* ClusterRoleBindings apply everywhere; RoleBindings only to requests in their own namespace (a cluster-scoped
  request never consults a RoleBinding); a RoleBinding may reference a Role of its namespace or a ClusterRole;
  a ClusterRoleBinding referencing a Role grants nothing (upstream looks the Role up in namespace "", which
  never exists: the denial reason names it as not found); ``roleRef.apiGroup`` is not looked at (as upstream);
* subjects: ``User`` matches the user name, ``Group`` one of the user's groups, ``ServiceAccount`` the user
  ``system:serviceaccount:<namespace>:<name>``, its namespace defaulting to the RoleBinding's (an SA subject
  without a namespace in a ClusterRoleBinding matches nobody); a ``User`` subject named like a service account
  matches that service account too; other kinds match nobody; a subject's ``apiGroup`` is not looked at;
* a rule allows a resource request when its verbs hold the verb or ``*``, its apiGroups the group or ``*``,
  its resources ``*``, ``resource`` (no subresource), ``resource/subresource`` or ``*/subresource`` (there is
  no ``resource/*``: it is an ordinary string that only a subresource literally named ``*`` would match),
  and its resourceNames are empty or hold the name (a request without a name, e.g. list or create, is
  allowed by a rule with resourceNames only if ``""`` is one of them); a non-resource request when the verbs
  match and a nonResourceURL is ``*``, the path, or ends in ``*`` and the path starts with what precedes the
  trailing ``*`` s;
* the group ``system:masters`` is allowed everything with an empty reason (upstream: the privileged-groups
  authorizer kube-apiserver puts before every mode);
* aggregated ClusterRoles (``aggregationRule``): upstream's controller overwrites their ``rules`` with the
  union of the rules of the other ClusterRoles their selectors match; here, without that controller, an
  aggregated role's rules are computed the same way when asked for (cached until a ClusterRole changes):
  the union of the stored rules of every non-aggregated ClusterRole reachable through the selectors (the
  least fixed point of the controller's rewrite: cycles of aggregated roles contribute no stale rules). A
  role whose selectors do not parse keeps its stored rules (the controller's sync fails for it).

Memory: strings are interned, rules are tuples of tuples shared between identical rules and identical rule
lists, bindings are indexed by subject (per namespace for RoleBindings) so a decision is a few dict lookups
and the rules of the few roles bound to the user. Nothing here keeps the objects: the watch cache does.
"""
from __future__ import annotations

import sys
from typing import Iterable

import orjson

from .attributes import Attributes, Decision
from .user import SYSTEM_PRIVILEGED_GROUP, UserInfo

KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
USER, GROUP, LOCAL_SA, SA = 0, 1, 2, 3
_BIG = 12        # rule lists longer than this are looked up through an index by (verb, resource)
SA_PREFIX = "system:serviceaccount:"

_intern = sys.intern
ALLOW_PRIVILEGED = Decision(True, "")
DENY = Decision(False, "")
_NONE: dict = {}

# A rule: (verbs, apiGroups, resources, resourceNames, nonResourceURLs, url_prefixes), each a tuple as stored
# (order kept: rules_for gives them back), url_prefixes the nonResourceURLs ending in "*" with the "*"s cut.
Rule = tuple
# A binding: (name, roleRef kind, roleRef name, codes, *subject keys), one flat tuple (a separate tuple of keys
# would cost 40 B more per binding, and a table entry to share it): the keys in subject order from index
# KEYS, each with a 2-bit code (bits 2i, 2i+1 of codes) naming the index it is in: USER (the user name a User
# subject matches), GROUP (a Group subject's name), LOCAL_SA (the name of a ServiceAccount of the RoleBinding's
# own namespace: not spelt out as a user name, so one string serves every namespace), SA (a ServiceAccount of
# another namespace, every ClusterRoleBinding's: two keys, its namespace then its name, the second coded USER
# and never indexed; the binding is indexed under the namespace). A ServiceAccount's user name spelt out would
# be a string of its own per (namespace, name), interned: every tenant's operator bound cluster-wide made
# several (bench.rbac_floor: 33 B per RBAC object); its namespace and name are strings other objects share.
# Subjects that can match nobody are left out.
Binding = tuple
KEYS = 4
SMALL_REGISTRY = 32
# A scope's index (the cluster's, or a namespace's for its RoleBindings): dicts from a key to the binding that
# has it, or a list of those: by user name, by group, by local ServiceAccount name, by ServiceAccount namespace.
Index = tuple


def _new_index() -> Index:
    return ({}, {}, {}, {})


def _obj(obj) -> dict:
    return orjson.loads(obj) if isinstance(obj, (bytes, bytearray, memoryview)) else obj


def _strs(v) -> tuple:
    if not v:
        return ()
    return tuple(_intern(s) for s in v if isinstance(s, str))


class _Selector:
    """A metav1.LabelSelector as LabelSelectorAsSelector reads it (matchLabels and matchExpressions, all of
    them must hold; {} matches everything)."""
    __slots__ = ("labels", "exprs")

    def __init__(self, sel: dict):
        if not isinstance(sel, dict):
            raise ValueError("selector")
        ml = sel.get("matchLabels") or {}
        self.labels = tuple((str(k), str(v)) for k, v in ml.items())
        exprs = []
        for e in sel.get("matchExpressions") or ():
            op, key, vals = e.get("operator"), e.get("key"), tuple(e.get("values") or ())
            if op in ("In", "NotIn"):
                if not vals:
                    raise ValueError("values")
            elif op in ("Exists", "DoesNotExist"):
                if vals:
                    raise ValueError("values")
            else:
                raise ValueError("operator")
            exprs.append((key, op, frozenset(vals)))
        self.exprs = tuple(exprs)

    def matches(self, labels: dict) -> bool:
        for k, v in self.labels:
            if labels.get(k) != v:
                return False
        for k, op, vals in self.exprs:
            if op == "In":
                if k not in labels or labels[k] not in vals:
                    return False
            elif op == "NotIn":
                if k in labels and labels[k] in vals:
                    return False
            elif op == "Exists":
                if k not in labels:
                    return False
            elif k in labels:
                return False
        return True


def _not_found(kind: str, name: str) -> str:
    return f'{kind.lower()}.rbac.authorization.k8s.io "{name}" not found'


def _aggregate(errs: list[str]) -> str:
    """utilerrors.NewAggregate(errs).Error(): one message as is, several deduplicated in brackets."""
    if len(errs) == 1:
        return errs[0]
    seen: list[str] = []
    for e in errs:
        if e not in seen:
            seen.append(e)
    return seen[0] if len(seen) == 1 else "[" + ", ".join(seen) + "]"


class RBACAuthorizer:
    def __init__(self, privileged_groups: Iterable[str] = (SYSTEM_PRIVILEGED_GROUP,)):
        self.privileged_groups = tuple(privileged_groups)
        self.big = _BIG
        self._roles: dict[str, dict[str, tuple]] = {}       # namespace -> role name -> rules
        self._cluster_roles: dict[str, tuple] = {}          # name -> stored rules
        self._aggregation: dict[str, tuple] = {}            # aggregated ClusterRole -> its _Selectors
        self._labels: dict[str, tuple] = {}                 # ClusterRole with labels -> sorted label items
        self._effective: dict[str, tuple] = {}              # aggregated ClusterRole -> computed rules (cache)
        self._compiled: dict[int, tuple] = {}               # id(long rule list) -> (it, its (verb, resource) index)
        # namespace -> its RoleBindings: a tuple of them (found by name in a scan) while they are few, a dict by
        # name beyond SMALL_REGISTRY (a dict per namespace cost 16 B per RBAC object of bench.rbac_floor's mix)
        self._rb: dict[str, tuple | dict[str, Binding]] = {}
        self._crb: dict[str, Binding] = {}                  # name -> binding
        self._rb_idx: dict[str, Index] = {}                # namespace -> its RoleBindings' index
        self._crb_idx: Index = _new_index()
        self._shared: dict = {}                             # identical rules, rule lists, key tuples: one copy
        self._dropped = 0                                   # shared values possibly orphaned since the last sweep

    # ------------------------------------------------------------------ maintenance from list+watch

    def replace(self, kind: str, objects: Iterable) -> None:
        """The state of one kind after a (re)list: everything of that kind is dropped, then `objects` added."""
        if kind == "Role":
            self._roles = {}
        elif kind == "ClusterRole":
            self._cluster_roles, self._aggregation, self._labels = {}, {}, {}
            self._effective = {}
            self._compiled = {}
        elif kind == "RoleBinding":
            self._rb, self._rb_idx = {}, {}
        elif kind == "ClusterRoleBinding":
            self._crb, self._crb_idx = {}, _new_index()
        else:
            raise ValueError(f"not an RBAC kind: {kind!r}")
        self._sweep()
        for o in objects:
            self.apply(kind, "ADDED", o)

    def apply(self, kind: str, event_type: str, obj) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) of one RBAC object (a dict, or its JSON bytes)."""
        o = _obj(obj)
        md = o.get("metadata") or {}
        name = md.get("name") or ""
        ns = md.get("namespace") or ""
        deleted = event_type == "DELETED"
        if kind == "Role":
            self._apply_role(ns, name, None if deleted else o)
        elif kind == "ClusterRole":
            self._apply_cluster_role(name, None if deleted else o, md)
        elif kind == "RoleBinding":
            self._apply_binding(ns, name, None if deleted else o)
        elif kind == "ClusterRoleBinding":
            self._apply_binding("", name, None if deleted else o)
        else:
            raise ValueError(f"not an RBAC kind: {kind!r}")
        if self._dropped > max(4096, len(self._shared)):
            self._sweep()

    def _share(self, v):
        return self._shared.setdefault(v, v)

    def _rules(self, rules) -> tuple:
        out = []
        for r in rules or ():
            if not isinstance(r, dict):
                continue
            urls = _strs(r.get("nonResourceURLs"))
            prefixes = tuple(_intern(u.rstrip("*")) for u in urls if u.endswith("*"))
            out.append(self._share((self._share(_strs(r.get("verbs"))), self._share(_strs(r.get("apiGroups"))),
                                    self._share(_strs(r.get("resources"))),
                                    self._share(_strs(r.get("resourceNames"))), self._share(urls),
                                    self._share(prefixes) if prefixes else None)))
        return self._share(tuple(out))

    def _apply_role(self, ns: str, name: str, o: dict | None) -> None:
        if o is None:
            d = self._roles.get(ns)
            if d is not None and d.pop(name, None) is not None:
                self._dropped += 1
                if not d:
                    del self._roles[ns]
            return
        d = self._roles.get(ns)
        if d is None:
            d = self._roles[_intern(ns)] = {}
        if name in d:
            self._dropped += 1
        d[_intern(name)] = self._rules(o.get("rules"))

    def _apply_cluster_role(self, name: str, o: dict | None, md: dict) -> None:
        old_relevant = name in self._aggregation or name in self._labels
        if name in self._cluster_roles:
            self._dropped += 1
        self._cluster_roles.pop(name, None)
        self._aggregation.pop(name, None)
        self._labels.pop(name, None)
        new_relevant = False
        if o is not None:
            name = _intern(name)
            self._cluster_roles[name] = self._rules(o.get("rules"))
            agg = o.get("aggregationRule")
            if isinstance(agg, dict):
                try:
                    self._aggregation[name] = tuple(_Selector(s) for s in agg.get("clusterRoleSelectors") or ())
                except (ValueError, TypeError, AttributeError):
                    pass  # the controller cannot sync it: its stored rules stay
            labels = md.get("labels")
            if isinstance(labels, dict) and labels:
                # label pairs shared too: operators' charts repeat them (managed-by, part-of) across roles
                self._labels[name] = self._share(tuple(sorted(self._share((_intern(str(k)), _intern(str(v))))
                                                              for k, v in labels.items())))
            new_relevant = name in self._aggregation or name in self._labels
        if self._effective and (old_relevant or new_relevant or self._aggregates_everything()):
            self._effective = {}
            self._compiled = {}

    def _aggregates_everything(self) -> bool:
        return any(not s.labels and not s.exprs for sels in self._aggregation.values() for s in sels)

    def _binding(self, ns: str, name: str, o: dict) -> Binding:
        ref = o.get("roleRef") or {}
        keys, codes = [], 0
        for s in o.get("subjects") or ():
            if not isinstance(s, dict):
                continue
            kind, sname = s.get("kind"), s.get("name") or ""
            if kind == "User":
                keys.append(_intern(sname))
            elif kind == "Group":
                codes |= GROUP << 2 * len(keys)
                keys.append(_intern(sname))
            elif kind == "ServiceAccount":
                sa_ns = s.get("namespace") or ns
                if sa_ns and sa_ns == ns:
                    codes |= LOCAL_SA << 2 * len(keys)
                    keys.append(_intern(sname))
                elif sa_ns:
                    codes |= SA << 2 * len(keys)
                    keys.append(_intern(sa_ns))
                    keys.append(_intern(sname))
        return (_intern(name), _intern(ref.get("kind") or ""), _intern(ref.get("name") or ""), codes, *keys)


    def _apply_binding(self, ns: str, name: str, o: dict | None) -> None:
        reg = self._rb.get(ns, ()) if ns else self._crb
        old = _registered(reg, name)
        if old is not None:   # (bindings hold nothing of the sharing table: no sweep to count for)
            idx = self._rb_idx[ns] if ns else self._crb_idx
            for code, k in _indexed(old):
                _unlink(idx[code], k, old)
            if type(reg) is dict:
                del reg[name]
            else:
                reg = self._rb[ns] = tuple(x for x in reg if x is not old)
            if ns and not reg and o is None:
                del self._rb[ns], self._rb_idx[ns]
        if o is None:
            return
        ns = _intern(ns)
        b = self._binding(ns, name, o)
        if type(reg) is dict:
            reg[b[0]] = b      # keyed by the interned name: the decoded one would stay alive beside it
        elif len(reg) < SMALL_REGISTRY:
            self._rb[ns] = reg + (b,)
        else:
            self._rb[ns] = {x[0]: x for x in reg + (b,)}
        if not ns:
            idx = self._crb_idx
        else:
            idx = self._rb_idx.get(ns)
            if idx is None:
                idx = self._rb_idx[ns] = _new_index()
        for code, k in _indexed(b):
            _link(idx[code], k, b)

    def _sweep(self) -> None:
        """Rebuild the table of shared values from what is still in use (drops rules nobody holds)."""
        self._shared = {}
        for d in self._roles.values():
            for name, rules in d.items():
                d[name] = self._reshare(rules)
        for name, rules in self._cluster_roles.items():
            self._cluster_roles[name] = self._reshare(rules)
        for name, labels in self._labels.items():
            self._labels[name] = self._share(tuple(self._share(kv) for kv in labels))
        self._effective = {}
        self._compiled = {}
        self._dropped = 0   # bindings are not in the table (they hold interned strings only)

    def _reshare(self, rules: tuple) -> tuple:
        return self._share(tuple(self._share(tuple(self._share(f) if f is not None else None for f in r))
                                 for r in rules))

    # ------------------------------------------------------------------ roles

    def _cluster_role_rules(self, name: str):
        """Rules of a ClusterRole (aggregated ones computed), or None if it does not exist."""
        if name not in self._aggregation:
            return self._cluster_roles.get(name)
        eff = self._effective.get(name)
        if eff is None:
            eff = self._effective[name] = self._aggregated_rules(name)
        return eff

    def _aggregated_rules(self, name: str) -> tuple:
        seen_agg = {name}
        seen_leaf: set[str] = set()
        stack = [name]
        out: list = []
        out_set: set = set()
        labels_of = {n: dict(items) for n, items in self._labels.items()}
        while stack:
            sels = self._aggregation[stack.pop()]
            for cand in self._cluster_roles:
                if cand in seen_agg or cand in seen_leaf:
                    continue
                labels = labels_of.get(cand, {})
                if not any(s.matches(labels) for s in sels):
                    continue
                if cand in self._aggregation:
                    seen_agg.add(cand)
                    stack.append(cand)
                else:
                    seen_leaf.add(cand)
                    for r in self._cluster_roles[cand]:
                        if r not in out_set:
                            out_set.add(r)
                            out.append(r)
        return tuple(out)

    # ------------------------------------------------------------------ decisions

    def authorize(self, a: Attributes) -> Decision:
        user = a.user
        groups = user.groups
        for g in self.privileged_groups:
            if g in groups:
                return ALLOW_PRIVILEGED
        uname = user.name
        ns = a.namespace
        verb = a.verb
        errors = None
        resource_request = a.resource_request
        if resource_request:
            api_group, name, sub = a.api_group, a.name, a.subresource
            combined = a.resource + "/" + sub if sub else a.resource
            star_sub = "*/" + sub if sub else None
        else:
            path = a.path
        big = self.big
        for scope in (("", ns) if ns else ("",)):
            if scope:
                idx = self._rb_idx.get(scope)
                if idx is None:
                    break
            else:
                idx = self._crb_idx
            users, gidx, sas, other_sas = idx
            found = users.get(uname)
            hits = [] if found is None else ([found] if type(found) is tuple else list(found))
            if (sas or other_sas) and uname.startswith(SA_PREFIX):
                _sa_hits(uname, scope, sas, other_sas, hits)
            for g in groups:
                f = gidx.get(g)
                if f is not None:
                    if type(f) is tuple:
                        hits.append(f)
                    else:
                        hits.extend(f)
            # A group bound many times in a namespace (an operator's chart per app) often reaches the same rules
            # through several bindings: rules that did not allow the request once will not the second time.
            tried = set() if len(hits) > 4 else None
            roles_here = self._roles.get(scope, _NONE) if scope else _NONE
            for b in hits:
                kind = b[1]
                ref = b[2]
                if kind == "ClusterRole":
                    rules = self._cluster_role_rules(ref)
                elif kind == "Role":
                    rules = roles_here.get(ref)
                else:
                    rules = None
                if rules is None:
                    if errors is None:
                        errors = []
                    errors.append(_not_found(kind, ref) if kind in ("Role", "ClusterRole")
                                  else f'unsupported role reference kind: "{kind}"')
                    continue
                if tried is not None:
                    if id(rules) in tried:
                        continue
                    tried.add(id(rules))
                if len(rules) > big:   # e.g. an aggregated role: only the rules naming this verb and resource
                    rules = self._candidates(rules, verb, combined if resource_request else None, star_sub
                                             if resource_request else None)
                # (verbs, apiGroups, resources, resourceNames, nonResourceURLs, URL prefixes): read by index, as
                # most rules fail on the first field (unpacking all six cost 146 ns a rule, indexing 80)
                for r in rules:
                    verbs = r[0]
                    if verb not in verbs and "*" not in verbs:
                        continue
                    if resource_request:
                        agroups = r[1]
                        if api_group not in agroups and "*" not in agroups:
                            continue
                        res = r[2]
                        if "*" not in res and combined not in res and (star_sub is None or star_sub not in res):
                            continue
                        names = r[3]
                        if names and name not in names:
                            continue
                    else:
                        urls = r[4]
                        if "*" not in urls and path not in urls:
                            prefixes = r[5]
                            if prefixes is None:
                                continue
                            for p in prefixes:
                                if path.startswith(p):
                                    break
                            else:
                                continue
                    return Decision(True, "RBAC: allowed by " + self._describe(b, scope, user))
        if errors:
            return Decision(False, "RBAC: " + _aggregate(errors))
        return DENY

    def _candidates(self, rules: tuple, verb: str, combined: str | None, star_sub: str | None):
        """The rules of a long rule list that may allow the request (a superset of those that do), from an index
        by verb, then resource, built the first time the list is used (nested dicts: no key tuple to make per
        lookup)."""
        c = self._compiled.get(id(rules))
        if c is None or c[0] is not rules:
            by_res: dict = {}
            by_verb: dict = {}
            for r in rules:
                for v in r[0]:
                    if r[2]:
                        per = by_res.setdefault(v, {})
                        for x in r[2]:
                            per.setdefault(x, []).append(r)
                    if r[4]:
                        by_verb.setdefault(v, []).append(r)
            c = self._compiled[id(rules)] = (rules, by_res, by_verb)
        if combined is None:
            got, star = c[2].get(verb), c[2].get("*")
            if star is None:
                return got or ()
            return star if got is None else got + star
        out: list = []
        by_res = c[1]
        for v in (verb, "*"):
            per = by_res.get(v)
            if per is not None:
                got = per.get(combined)
                if got:
                    out += got
                got = per.get("*")
                if got:
                    out += got
                if star_sub is not None:
                    got = per.get(star_sub)
                    if got:
                        out += got
        return out

    @staticmethod
    def _describe(b: Binding, ns: str, user: UserInfo) -> str:
        """Upstream's source describer: the binding, its role, and the first of its subjects that applies."""
        subject = ""
        keys = b[KEYS:]
        i = 0
        while i < len(keys):
            k = keys[i]
            code = b[3] >> 2 * i & 3
            i += 1
            if code == GROUP:
                if k in user.groups:
                    subject = f'Group "{k}"'
                    break
            elif code == LOCAL_SA:
                if user.name == f"{SA_PREFIX}{ns}:{k}":
                    subject = f'ServiceAccount "{k}/{ns}"'
                    break
            elif code == SA:
                i += 1
                if user.name == f"{SA_PREFIX}{k}:{keys[i - 1]}":
                    subject = f'ServiceAccount "{keys[i - 1]}/{k}"'
                    break
            elif k == user.name:     # a User subject, even one named like a service account (as upstream)
                subject = f'User "{k}"'
                break
        if ns:
            return f'RoleBinding "{b[0]}/{ns}" of {b[1]} "{b[2]}" to {subject}'
        return f'ClusterRoleBinding "{b[0]}" of {b[1]} "{b[2]}" to {subject}'

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[dict], list[dict], bool, str]:
        """What the user may do in the namespace (cluster-wide if ""), in the SelfSubjectRulesReview shape:
        (resourceRules, nonResourceRules, incomplete, evaluationError). Upstream's RBAC resolver lists every
        rule of every applicable binding, duplicates included; `incomplete` is False as upstream's RBAC."""
        res_rules: list[dict] = []
        nonres: list[dict] = []
        errors: list[str] = []
        for scope in (("", namespace) if namespace else ("",)):
            users, gidx, sas, other_sas = (self._rb_idx.get(scope) or _new_index()) if scope else self._crb_idx
            hits = _as_list(users.get(user.name))
            for g in user.groups:
                hits.extend(_as_list(gidx.get(g)))
            if user.name.startswith(SA_PREFIX):
                _sa_hits(user.name, scope, sas, other_sas, hits)
            seen: set = set()
            for b in hits:
                if id(b) in seen:
                    continue
                seen.add(id(b))
                kind = b[1]
                if kind == "ClusterRole":
                    rules = self._cluster_role_rules(b[2])
                elif kind == "Role" and scope:
                    rules = self._roles.get(scope, {}).get(b[2])
                else:
                    rules = None
                if rules is None:
                    errors.append(_not_found(kind, b[2]) if kind in ("Role", "ClusterRole")
                                  else f'unsupported role reference kind: "{kind}"')
                    continue
                for verbs, agroups, res, names, urls, _ in rules:
                    if res:
                        d = {"verbs": list(verbs), "apiGroups": list(agroups), "resources": list(res)}
                        if names:
                            d["resourceNames"] = list(names)
                        res_rules.append(d)
                    if urls:
                        nonres.append({"verbs": list(verbs), "nonResourceURLs": list(urls)})
        return res_rules, nonres, False, _aggregate(errors) if errors else ""

    # ------------------------------------------------------------------ introspection

    def counts(self) -> dict[str, int]:
        return {"Role": sum(len(d) for d in self._roles.values()), "ClusterRole": len(self._cluster_roles),
                "RoleBinding": sum(len(d) for d in self._rb.values()), "ClusterRoleBinding": len(self._crb)}


def _registered(reg: tuple | dict, name: str) -> Binding | None:
    """The binding named `name` in a registry (a dict by name, or a tuple of bindings)."""
    if type(reg) is dict:
        return reg.get(name)
    for b in reg:
        if b[0] == name:
            return b
    return None


def _indexed(b: Binding):
    """(index number, key) of each of a binding's indexed keys (a ServiceAccount of another namespace: its
    namespace's)."""
    keys = b[KEYS:]
    codes = b[3]
    i = 0
    while i < len(keys):
        code = codes >> 2 * i & 3
        yield code, keys[i]
        i += 2 if code == SA else 1


def _has_sa(b: Binding, sa_ns: str, sa_name: str) -> bool:
    """Whether ServiceAccount sa_name of namespace sa_ns (another than the binding's) is a subject of `b`."""
    keys = b[KEYS:]
    codes = b[3]
    i = 0
    while i < len(keys):
        if codes >> 2 * i & 3 == SA:
            if keys[i] == sa_ns and keys[i + 1] == sa_name:
                return True
            i += 2
        else:
            i += 1
    return False


def _sa_hits(uname: str, scope: str, sas: dict, other_sas: dict, hits: list) -> None:
    """Bindings of a scope that name the service account user `uname` (system:serviceaccount:<ns>:<name>) as a
    ServiceAccount subject, appended to hits. A subject matches when its user name spelt out equals uname
    (upstream's serviceaccount.MatchesUsername), so every ':' of the rest is tried as the end of the namespace:
    a subject's namespace is not validated and may hold one."""
    rest = uname[len(SA_PREFIX):]
    cut = rest.find(":")
    while cut >= 0:
        sa_ns, sa_name = rest[:cut], rest[cut + 1:]
        if sa_ns == scope:
            hits.extend(_as_list(sas.get(sa_name)))
        f = other_sas.get(sa_ns)
        if f is not None:
            for b in (f,) if type(f) is tuple else f:
                if _has_sa(b, sa_ns, sa_name):
                    hits.append(b)
        cut = rest.find(":", cut + 1)


def _as_list(v) -> list:
    if v is None:
        return []
    return [v] if type(v) is tuple else list(v)


class _Group(tuple):
    """Two to SMALL_GROUP bindings under one index key, as a tuple (a list of two cost 16 B more, of three or
    four 24-32 B more); a list beyond. Its own type: a bare tuple is one binding."""
    __slots__ = ()


SMALL_GROUP = 16


def _link(index: dict, key: str, b: Binding) -> None:
    cur = index.get(key)
    if cur is None:
        index[key] = b
    elif type(cur) is tuple:
        index[key] = _Group((cur, b))
    elif type(cur) is _Group:
        index[key] = _Group((*cur, b)) if len(cur) < SMALL_GROUP else [*cur, b]
    else:
        cur.append(b)


def _unlink(index: dict, key: str, b: Binding) -> None:
    cur = index.get(key)
    if cur is None:
        return
    if cur is b:
        del index[key]
        return
    if type(cur) is _Group:
        rest = tuple(x for x in cur if x is not b)
        index[key] = rest[0] if len(rest) == 1 else _Group(rest)
    elif type(cur) is list:
        for i, x in enumerate(cur):
            if x is b:
                del cur[i]
                break
        if len(cur) == 1:
            index[key] = cur[0]
        elif not cur:
            del index[key]
