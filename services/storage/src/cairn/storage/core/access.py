"""What each public request needs from the authorization rules. Pure.

Each function answers None (allowed) or the refusal's message. The rules
(`cairn.common.auth.rules.Policy`) decide per key prefix; this module knows what
each request touches:

- a put or delete touches its key (a sequence put: keys that start with it);
- a put under a session also needs the session's owner to be the caller;
- a delete-range, a get other than an exact one (FLOOR/CEILING/LOWER/HIGHER may
  answer a key outside the asked prefix) and a get by secondary index (the index
  maps to any primary key) need the whole namespace;
- notifications carry every key of the shard: the whole namespace;
- a sequence-updates stream reads its key's prefix;
- List and RangeScan are answered with the keys the caller may read only (see
  `ScanFilter`), or refused if it may read none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cairn.common.auth.rules import Access, Policy, describe, key_allowed, whole_namespace
from cairn.common.identity import Principal
from cairn.proto import oxia_client_pb2 as pb

EQUAL = pb.KeyComparisonType.EQUAL


@dataclass(frozen=True, slots=True)
class Caller:
    principal: Principal
    policy: Policy

    @property
    def owner(self) -> str:
        """What a session this caller opens records as its owner."""
        return str(self.principal)

    def prefixes(self, access: Access, namespace: str) -> frozenset[str]:
        return self.policy.prefixes(self.principal, access, namespace)


def write_problem(
    caller: Caller,
    namespace: str,
    request: pb.WriteRequest,
    session_owner: Callable[[int], str | None],
) -> str | None:
    if not caller.policy.enabled:
        return None
    prefixes = caller.prefixes(Access.WRITE, namespace)
    if request.delete_ranges and not whole_namespace(prefixes):
        return describe(caller.principal, Access.WRITE, namespace, ["a key range"])
    for put in request.puts:
        if not key_allowed(prefixes, put.key):
            return describe(caller.principal, Access.WRITE, namespace, [put.key])
        if put.HasField("session_id"):
            owner = session_owner(put.session_id)
            # None: no such session; the apply step answers SESSION_DOES_NOT_EXIST.
            if owner is not None and owner != caller.owner:
                return f"session {put.session_id} belongs to another principal"
    for delete in request.deletes:
        if not key_allowed(prefixes, delete.key):
            return describe(caller.principal, Access.WRITE, namespace, [delete.key])
    return None


def read_problem(caller: Caller, namespace: str, request: pb.ReadRequest) -> str | None:
    if not caller.policy.enabled:
        return None
    prefixes = caller.prefixes(Access.READ, namespace)
    if whole_namespace(prefixes):
        return None
    for get in request.gets:
        if get.comparison_type != EQUAL or get.HasField("secondary_index_name"):
            return describe(caller.principal, Access.READ, namespace, ["every key"])
        if not key_allowed(prefixes, get.key):
            return describe(caller.principal, Access.READ, namespace, [get.key])
    return None


def namespace_problem(caller: Caller, access: Access, namespace: str) -> str | None:
    """For calls that see every key of the namespace (notifications)."""
    if whole_namespace(caller.prefixes(access, namespace)):
        return None
    return describe(caller.principal, access, namespace, ["every key"])


def some_access_problem(caller: Caller, access: Access, namespace: str) -> str | None:
    """For calls that need some right in the namespace (its shard map, a session)."""
    if caller.prefixes(access, namespace):
        return None
    return describe(caller.principal, access, namespace, [])


def key_problem(caller: Caller, access: Access, namespace: str, key: str) -> str | None:
    if key_allowed(caller.prefixes(access, namespace), key):
        return None
    return describe(caller.principal, access, namespace, [key])


def session_problem(caller: Caller, owner: str | None) -> str | None:
    """KeepAlive / CloseSession: only the owner. None owner: unknown session
    (NOT_FOUND follows, as before)."""
    if not caller.policy.enabled or owner is None or owner == caller.owner:
        return None
    return "the session belongs to another principal"


class ScanFilter:
    """Which keys a List/RangeScan may answer: all (None) or those under the
    caller's prefixes. A caller with no prefix at all is refused before."""

    def __init__(self, caller: Caller, namespace: str) -> None:
        prefixes = (
            caller.prefixes(Access.READ, namespace) if caller.policy.enabled else frozenset({""})
        )
        self.prefixes: frozenset[str] | None = None if whole_namespace(prefixes) else prefixes
        self.refusal = (
            describe(caller.principal, Access.READ, namespace, []) if not prefixes else None
        )

    def allows(self, key: str) -> bool:
        return self.prefixes is None or key_allowed(self.prefixes, key)
