"""Authorization rules: which principals may read, write or administer which
namespaces and key prefixes. Pure: `Policy.prefixes` is the one decision, and
the helpers below turn it into the checks the servers make.

A rule grants one access level (admin includes write, write includes read) to
principals on namespaces (`*` = every namespace) and key prefixes (`""` = every
key). A prefix may hold `{name}`, replaced by the caller's name, so one rule
gives every user a home: `"prefixes": ["/users/{name}/"]`.

Key prefixes are plain string prefixes of the key. In the hierarchical key order
the keys under one prefix are not one contiguous range (`/a/x` and `/a/x/y`
have other keys between them), so a range of keys is never authorized by its
bounds: operations over ranges either need the whole namespace (delete-range,
notifications, non-exact gets) or have each key they return checked
(list, range scan).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from cairn.common.identity import Principal, Role

ANY_NAMESPACE = "*"
ANY_PRINCIPAL = "*"
ANONYMOUS_NAME = "anonymous"
# The caller that presented no credentials at all.
ANONYMOUS = Principal(Role.USER, ANONYMOUS_NAME)
NAME_PLACEHOLDER = "{name}"


class Access(IntEnum):
    READ = 1
    WRITE = 2
    ADMIN = 3


def principal_pattern_matches(pattern: str, principal: Principal) -> bool:
    """`*` any authenticated principal; `role:name`; a bare name is a user's."""
    if pattern == ANY_PRINCIPAL:
        return principal != ANONYMOUS
    role, sep, name = pattern.partition(":")
    if not sep:
        return principal == Principal(Role.USER, pattern)
    return principal.role.value == role and principal.name == name


@dataclass(frozen=True, slots=True)
class Rule:
    access: Access
    principals: tuple[str, ...] = ()
    roles: tuple[Role, ...] = ()
    namespaces: tuple[str, ...] = (ANY_NAMESPACE,)
    prefixes: tuple[str, ...] = ("",)

    def applies_to(self, principal: Principal) -> bool:
        if principal.role in self.roles and principal != ANONYMOUS:
            return True
        return any(principal_pattern_matches(p, principal) for p in self.principals)

    def covers_namespace(self, namespace: str) -> bool:
        return ANY_NAMESPACE in self.namespaces or namespace in self.namespaces


@dataclass(frozen=True, slots=True)
class Policy:
    """All rules. `enabled=False` grants everything to everyone (an explicit
    operator choice, see config.py)."""

    rules: tuple[Rule, ...] = ()
    enabled: bool = True

    def prefixes(self, principal: Principal, access: Access, namespace: str) -> frozenset[str]:
        """The key prefixes of `namespace` on which `principal` has `access`
        (`""` among them: every key). Empty: none at all."""
        if not self.enabled:
            return frozenset({""})
        found: set[str] = set()
        for rule in self.rules:
            if (
                rule.access >= access
                and rule.covers_namespace(namespace)
                and rule.applies_to(principal)
            ):
                found.update(p.replace(NAME_PLACEHOLDER, principal.name) for p in rule.prefixes)
        if "" in found:
            return frozenset({""})
        return frozenset(found)

    def allows_key(self, principal: Principal, access: Access, namespace: str, key: str) -> bool:
        return key_allowed(self.prefixes(principal, access, namespace), key)

    def allows_keys(
        self, principal: Principal, access: Access, namespace: str, keys: Iterable[str]
    ) -> bool:
        prefixes = self.prefixes(principal, access, namespace)
        return all(key_allowed(prefixes, key) for key in keys)

    def allows_namespace(self, principal: Principal, access: Access, namespace: str) -> bool:
        """Access to every key of the namespace."""
        return whole_namespace(self.prefixes(principal, access, namespace))

    def allows_some(self, principal: Principal, access: Access, namespace: str) -> bool:
        """Access to at least some keys of the namespace."""
        return bool(self.prefixes(principal, access, namespace))


def key_allowed(prefixes: frozenset[str], key: str) -> bool:
    return any(key.startswith(prefix) for prefix in prefixes)


def whole_namespace(prefixes: frozenset[str]) -> bool:
    return "" in prefixes


def parse_rule(document: object) -> Rule:
    """One rule from its JSON form; ValueError says what is wrong."""
    if not isinstance(document, dict):
        raise ValueError("a rule must be a JSON object")
    unknown = set(document) - {"access", "principals", "roles", "namespaces", "prefixes"}
    if unknown:
        raise ValueError(f"unknown rule fields: {', '.join(sorted(unknown))}")
    try:
        access = Access[str(document["access"]).upper()]
    except KeyError:
        raise ValueError("a rule's access must be read, write or admin") from None
    principals = _strings(document.get("principals", []), "principals")
    try:
        roles = tuple(Role(r) for r in _strings(document.get("roles", []), "roles"))
    except ValueError:
        raise ValueError(f"roles must be among {', '.join(r.value for r in Role)}") from None
    if not principals and not roles:
        raise ValueError("a rule must name principals or roles")
    namespaces = _strings(document.get("namespaces", [ANY_NAMESPACE]), "namespaces")
    prefixes = _strings(document.get("prefixes", [""]), "prefixes")
    if not namespaces or not prefixes:
        raise ValueError("a rule's namespaces and prefixes must not be empty lists")
    return Rule(access, principals, roles, namespaces, prefixes)


def _strings(value: object, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"a rule's {name} must be a list of strings")
    return tuple(value)


def describe(principal: Principal, access: Access, namespace: str, what: Sequence[str]) -> str:
    """The message of a refusal (without the rules: they are the operator's)."""
    target = f" {', '.join(repr(w) for w in what[:3])}" if what else ""
    return f"{principal} may not {access.name.lower()}{target} in namespace {namespace!r}"
