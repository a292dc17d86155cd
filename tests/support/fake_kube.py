"""A fake Kubernetes API server over real HTTP, for the parts of the API Cairn uses.

Tests drive it with the official `kubernetes` client (`FakeKubeServer.api_client()`),
so they go through the same URLs, headers, (de)serialization and error decoding as
the controller against a real cluster. It keeps, like the API server:

- one global, monotonically increasing resourceVersion; every write that changes an
  object gets the next one, a write that changes nothing (a no-op update) keeps the
  object's version and sends no watch event;
- optimistic concurrency: PUT and PATCH naming a stale `metadata.resourceVersion`
  get 409 Conflict; a custom resource cannot be PUT without one (422);
- `metadata.generation` (custom resources, StatefulSets): 1 on create, +1 whenever
  anything but metadata and status changes;
- status subresources: the main resource ignores status changes, `/status` ignores
  everything else; creating a custom resource drops its status;
- `cairn.dev/v1 CairnCluster` objects defaulted and validated against the CRD's
  openAPIV3Schema (`kustomize/base/crd.yaml`), 422 Invalid with field causes;
- list with fieldSelector/labelSelector, and watch: newline-delimited JSON events
  after a resourceVersion (synthetic ADDED events when none is given), a bounded
  event history (an older resourceVersion gets an ERROR event with 410 Expired),
  `timeoutSeconds`, and ADDED/DELETED when an object enters/leaves a selector;
- errors as `Status` objects with matching HTTP codes (404 for unknown paths).

Resources: `cairnclusters` (cairn.dev/v1), `leases` (coordination.k8s.io/v1, with
MicroTime fields checked as strictly as the API server parses them), `pods` (v1,
plus helpers that change a pod's phase and readiness as the kubelet would) and
`statefulsets` (apps/v1, with the `scale` subresource).

Where it differs on purpose:
- unknown fields, and nulls in fields not marked `nullable`, of a custom object are
  rejected (422) where the API server prunes them silently: a mismatch between the
  model's documents and the CRD then fails tests instead of losing data unnoticed;
- a strategic merge patch (only offered for built-in kinds) is applied as a JSON
  merge patch: lists are replaced, not merged by key;
- no authentication, admission, finalizers, graceful deletion, server-side apply,
  dry run, watch bookmarks or pagination (`limit` is ignored, which the API allows).

Authorization (RBAC), opt-in per client: `enforce_role(role, user_agent=...)` lets
that client make only the calls the `rbac.authorization.k8s.io/v1` Role's rules
grant (verbs x resources, with `plural/subresource` and `*` as the API server
reads them, x apiGroups, x resourceNames), and answers anything else 403
Forbidden as the API server does. `authorized` records the (apiGroup, resource,
verb) each such client was granted, `forbidden` what it was refused.

Fault injection: `fail_next()` answers the next matching requests with an error
status (or drops the connection), `partition()` fails every request of one client
(clients are told apart by their User-Agent, see `api_client(user_agent=...)`),
`end_watches()` ends every open watch and `compact()` forgets the event history
(watches from older versions then get 410). `requests` records what was asked, and
`internal_errors` any bug of the fake itself (answered with 500): tests should
check that it stays empty.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import re
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes.client
import yaml

CRD_PATH = Path(__file__).resolve().parents[2] / "kustomize" / "base" / "crd.yaml"

Object = dict[str, Any]
Cause = dict[str, str]

# -- errors ------------------------------------------------------------------------


class ApiError(Exception):
    """An error answer: rendered as a `Status` object with the same HTTP code."""

    def __init__(self, code: int, reason: str, message: str, details: Object | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> Object:
        body: Object = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


# Reasons the API server gives for server-side failures, by code.
FAILURE_REASONS = {
    429: "TooManyRequests",
    500: "InternalError",
    502: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


# -- schema validation ---------------------------------------------------------------

# Keywords the validator implements (or that only annotate). A schema using any other
# is refused when loaded, so nothing in the CRD is silently left unchecked.
SCHEMA_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "items",
        "additionalProperties",
        "enum",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "pattern",
        "format",
        "nullable",
        "default",
        "description",
        "title",
        "example",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-preserve-unknown-fields",
    }
)
SCHEMA_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean"})
FORMATS = frozenset({"int32", "int64", "date-time"})
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


class SchemaError(ValueError):
    """A schema the validator cannot honour (unsupported keyword, type or format)."""


def check_schema(schema: Object, path: str = "") -> None:
    """Refuse schemas that use anything `validate` does not implement, and
    non-structural ones (every node needs a type)."""
    unknown = set(schema) - SCHEMA_KEYWORDS
    if unknown:
        raise SchemaError(f"{path or '<root>'}: unsupported schema keywords {sorted(unknown)}")
    kind = schema.get("type")
    if kind is None and not schema.get("x-kubernetes-preserve-unknown-fields"):
        raise SchemaError(f"{path or '<root>'}: no type (the schema is not structural)")
    if kind is not None and kind not in SCHEMA_TYPES:
        raise SchemaError(f"{path}: unsupported type {kind!r}")
    if "format" in schema and schema["format"] not in FORMATS:
        raise SchemaError(f"{path}: unsupported format {schema['format']!r}")
    if "default" in schema and not schema.get("nullable") and schema["default"] is None:
        raise SchemaError(f"{path}: null default on a non-nullable field")
    for name, child in schema.get("properties", {}).items():
        check_schema(child, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        check_schema(schema["additionalProperties"], f"{path}.*")
    elif "additionalProperties" in schema:
        raise SchemaError(f"{path}: additionalProperties must be a schema")
    if "items" in schema:
        check_schema(schema["items"], f"{path}[*]")
    list_type = schema.get("x-kubernetes-list-type")
    if list_type is not None and list_type not in ("atomic", "set", "map"):
        raise SchemaError(f"{path}: unsupported x-kubernetes-list-type {list_type!r}")
    if list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        required = schema.get("items", {}).get("required", [])
        if not keys or not all(key in required for key in keys):
            raise SchemaError(f"{path}: list map keys must be required fields of the items")


def _json_repr(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _is_type(value: Any, kind: str) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return False


def validate(schema: Object, value: Any, path: str = "") -> list[Cause]:
    """Default `value` in place (absent properties that have a `default`) and return
    what is wrong with it, as Status causes in the API server's words."""
    causes: list[Cause] = []
    _validate(schema, value, path, causes)
    return causes


def _cause(causes: list[Cause], reason: str, path: str, message: str) -> None:
    causes.append({"reason": reason, "message": f"{path}: {message}", "field": path})


def _validate(schema: Object, value: Any, path: str, causes: list[Cause]) -> None:
    kind = schema.get("type")
    if value is None:
        if not schema.get("nullable"):
            _cause(
                causes,
                "FieldValueTypeInvalid",
                path,
                f"Invalid value: null: {path} in body must be of type {kind}",
            )
        return
    if kind is not None and not _is_type(value, kind):
        _cause(
            causes,
            "FieldValueTypeInvalid",
            path,
            f"Invalid value: {_json_repr(value)}: {path} in body must be of type {kind}: "
            f'"{type(value).__name__}"',
        )
        return
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_json_repr(option) for option in schema["enum"])
        _cause(
            causes,
            "FieldValueNotSupported",
            path,
            f"Unsupported value: {_json_repr(value)}: supported values: {supported}",
        )
    if kind in ("integer", "number"):
        _validate_number(schema, value, path, causes)
    elif kind == "string":
        _validate_string(schema, value, path, causes)
    elif kind == "array":
        _validate_array(schema, value, path, causes)
    elif kind == "object":
        _validate_object(schema, value, path, causes)


def _validate_number(schema: Object, value: float, path: str, causes: list[Cause]) -> None:
    shown = _json_repr(value)
    if "minimum" in schema and value < schema["minimum"]:
        _cause(
            causes,
            "FieldValueInvalid",
            path,
            f"Invalid value: {shown}: {path} in body should be greater than or equal to "
            f"{schema['minimum']}",
        )
    if "maximum" in schema and value > schema["maximum"]:
        _cause(
            causes,
            "FieldValueInvalid",
            path,
            f"Invalid value: {shown}: {path} in body should be less than or equal to "
            f"{schema['maximum']}",
        )
    bounds = INT_RANGES.get(schema.get("format", ""))
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        _cause(
            causes,
            "FieldValueInvalid",
            path,
            f"Invalid value: {shown}: {path} in body must be of format {schema['format']}",
        )


def _validate_string(schema: Object, value: str, path: str, causes: list[Cause]) -> None:
    shown = _json_repr(value)
    if "minLength" in schema and len(value) < schema["minLength"]:
        _cause(
            causes,
            "FieldValueInvalid",
            path,
            f"Invalid value: {shown}: {path} in body should be at least "
            f"{schema['minLength']} chars long",
        )
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        _cause(
            causes,
            "FieldValueTooLong",
            path,
            f"Too long: may not be more than {schema['maxLength']} bytes",
        )
    if "pattern" in schema and re.search(schema["pattern"], value) is None:
        _cause(
            causes,
            "FieldValueInvalid",
            path,
            f"Invalid value: {shown}: {path} in body should match '{schema['pattern']}'",
        )
    if schema.get("format") == "date-time" and RFC3339.match(value) is None:
        _cause(
            causes,
            "FieldValueInvalid",
            path,
            f"Invalid value: {shown}: {path} in body must be of type date-time: {shown}",
        )


def _validate_array(schema: Object, value: list[Any], path: str, causes: list[Cause]) -> None:
    if "minItems" in schema and len(value) < schema["minItems"]:
        _cause(
            causes,
            "FieldValueInvalid",
            path,
            f"Invalid value: {len(value)}: {path} in body should have at least "
            f"{schema['minItems']} items",
        )
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        _cause(
            causes,
            "FieldValueTooMany",
            path,
            f"Too many: {len(value)}: must have at most {schema['maxItems']} items",
        )
    items = schema.get("items")
    if items is not None:
        for index, item in enumerate(value):
            _validate(items, item, f"{path}[{index}]", causes)
    list_type = schema.get("x-kubernetes-list-type")
    if list_type not in ("set", "map"):
        return
    seen: set[str] = set()
    for index, item in enumerate(value):
        if list_type == "map":
            if not isinstance(item, dict):
                continue  # reported as a type error above
            key: Any = {name: item.get(name) for name in schema["x-kubernetes-list-map-keys"]}
        else:
            key = item
        identity = _json_repr(key)
        if identity in seen:
            _cause(
                causes, "FieldValueDuplicate", f"{path}[{index}]", f"Duplicate value: {identity}"
            )
        seen.add(identity)


def _validate_object(schema: Object, value: Object, path: str, causes: list[Cause]) -> None:
    properties: Object = schema.get("properties", {})
    prefix = f"{path}." if path else ""
    for name, child in properties.items():
        if name not in value and "default" in child:
            value[name] = copy.deepcopy(child["default"])
    for name in schema.get("required", []):
        if name not in value:
            _cause(causes, "FieldValueRequired", f"{prefix}{name}", "Required value")
    extra: Object | None = schema.get("additionalProperties")
    for name, item in value.items():
        child_path = f"{prefix}{name}"
        if name in properties:
            # The API server validates object metadata itself (see `check_metadata`).
            if path == "" and name == "metadata":
                continue
            _validate(properties[name], item, child_path, causes)
        elif extra is not None:
            _validate(extra, item, child_path, causes)
        elif not schema.get("x-kubernetes-preserve-unknown-fields"):
            _cause(causes, "FieldValueForbidden", child_path, "field not declared in schema")


def load_crd_schema(crd_path: Path = CRD_PATH, version: str = "v1") -> Object:
    """The openAPIV3Schema of one version of a CRD, checked with `check_schema`."""
    crd = yaml.safe_load(crd_path.read_text(encoding="utf-8"))
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            schema: Object = served["schema"]["openAPIV3Schema"]
            check_schema(schema)
            return schema
    raise SchemaError(f"{crd_path} has no version {version}")


# -- selectors ---------------------------------------------------------------------

Matcher = Callable[[Object], bool]
LABEL_SET_TERM = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^()]*)\)\s*$")


def _split_terms(text: str) -> list[str]:
    """Split a selector at commas outside parentheses (`a in (x,y),b=c`)."""
    terms: list[str] = []
    depth = 0
    current = ""
    for char in text:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [term.strip() for term in terms if term.strip()]


def parse_label_selector(text: str) -> Matcher:
    """Equality (`=`, `==`, `!=`), set (`in`, `notin`) and existence (`k`, `!k`).
    As in Kubernetes, `!=` and `notin` also match objects without the label."""
    # (label, operator, values) with operator one of in, notin, exists, absent.
    requirements: list[tuple[str, str, frozenset[str]]] = []
    for term in _split_terms(text):
        set_term = LABEL_SET_TERM.match(term)
        equality = next((op for op in ("!=", "==", "=") if op in term), None)
        if set_term is not None:
            values = frozenset(v.strip() for v in set_term.group(3).split(",") if v.strip())
            requirements.append((set_term.group(1), set_term.group(2), values))
        elif equality is not None:
            key, _, value = (part.strip() for part in term.partition(equality))
            if not key:
                raise bad_request(f"unable to parse requirement: {term!r}")
            operator = "notin" if equality == "!=" else "in"
            requirements.append((key, operator, frozenset({value})))
        elif term.startswith("!"):
            requirements.append((term[1:].strip(), "absent", frozenset()))
        elif re.fullmatch(r"[^\s!=(),]+", term):
            requirements.append((term, "exists", frozenset()))
        else:
            raise bad_request(f"unable to parse requirement: {term!r}")

    def holds(labels: dict[str, str], key: str, operator: str, values: frozenset[str]) -> bool:
        if operator == "in":
            return labels.get(key) in values
        if operator == "notin":
            return labels.get(key) not in values
        return (key in labels) == (operator == "exists")

    def matches(obj: Object) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(holds(labels, *requirement) for requirement in requirements)

    return matches


def _field_value(obj: Object, dotted: str) -> str:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def parse_field_selector(text: str, supported: tuple[str, ...]) -> Matcher:
    tests: list[tuple[str, bool, str]] = []
    for term in _split_terms(text):
        operator = next((op for op in ("!=", "==", "=") if op in term), None)
        if operator is None:
            raise bad_request(f"invalid selector: {text!r}; can't understand {term!r}")
        name, _, value = (part.strip() for part in term.partition(operator))
        if name not in supported:
            raise bad_request(f"field label not supported: {name}")
        tests.append((name, operator != "!=", value))

    def matches(obj: Object) -> bool:
        return all((_field_value(obj, name) == value) == equal for name, equal, value in tests)

    return matches


# -- patches -----------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _resolve(document: Any, parts: list[str]) -> Any:
    for part in parts:
        if isinstance(document, dict) and part in document:
            document = document[part]
        elif isinstance(document, list) and part.isdigit() and int(part) < len(document):
            document = document[int(part)]
        else:
            raise ApiError(422, "Invalid", f"path /{'/'.join(parts)} does not exist")
    return document


def _json_patch_add(document: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _resolve(document, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list) and (
        last == "-" or (last.isdigit() and int(last) <= len(parent))
    ):
        parent.insert(len(parent) if last == "-" else int(last), value)
    else:
        raise ApiError(422, "Invalid", f"cannot add at /{'/'.join(parts)}")
    return document


def _json_patch_remove(document: Any, parts: list[str]) -> Any:
    _resolve(document, parts)
    parent = _resolve(document, parts[:-1])
    if isinstance(parent, dict):
        del parent[parts[-1]]
    else:
        del parent[int(parts[-1])]
    return document


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    if not isinstance(operations, list):
        raise bad_request("a JSON patch must be a list of operations")
    document = copy.deepcopy(target)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise bad_request(f"malformed JSON patch operation {operation!r}")
        op, parts = operation["op"], _pointer(operation["path"])
        if op == "add":
            document = _json_patch_add(document, parts, copy.deepcopy(operation["value"]))
        elif op == "remove":
            document = _json_patch_remove(document, parts)
        elif op == "replace":
            _resolve(document, parts)
            document = _json_patch_remove(document, parts) if parts else document
            document = _json_patch_add(document, parts, copy.deepcopy(operation["value"]))
        elif op in ("move", "copy"):
            source = _pointer(operation["from"])
            value = copy.deepcopy(_resolve(document, source))
            if op == "move":
                document = _json_patch_remove(document, source)
            document = _json_patch_add(document, parts, value)
        elif op == "test":
            if _resolve(document, parts) != operation.get("value"):
                raise ApiError(422, "Invalid", f"testing value {operation['path']} failed")
        else:
            raise bad_request(f"unknown JSON patch operation {op!r}")
    return document


# -- resources ---------------------------------------------------------------------

MICRO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


# Compared and hashed by identity: each is one registered kind of resource.
@dataclass(frozen=True, eq=False)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    # Custom resources: a body must name its kind, and a PUT its resourceVersion.
    custom: bool = False
    status_subresource: bool = False
    scale_subresource: bool = False
    tracks_generation: bool = False
    # What a created object's status is reset to; None drops it (custom resources).
    initial_status: Object | None = None
    field_labels: tuple[str, ...] = ("metadata.name", "metadata.namespace")
    # Extra checks on a whole object: 422 causes (ApiError for decode-level errors).
    check: Callable[[Object], list[Cause]] | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """`plural.group`, as the API server names resources in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def details(self, name: str, **extra: Any) -> Object:
        details: Object = {"name": name, "kind": self.plural, **extra}
        if self.group:
            details["group"] = self.group
        return details


def _check_lease(lease: Object) -> list[Cause]:
    spec = lease.get("spec") or {}
    causes: list[Cause] = []
    for name in ("acquireTime", "renewTime"):
        value = spec.get(name)
        # The API server decodes MicroTime with Go's RFC3339Micro layout: exactly six
        # fraction digits. Anything else fails decoding (400), before validation.
        if value is not None and (not isinstance(value, str) or not MICRO_TIME.match(value)):
            raise bad_request(
                f'Lease in version "v1" cannot be handled as a Lease: parsing time '
                f'{json.dumps(value)} as "2006-01-02T15:04:05.000000Z07:00": '
                "cannot parse"
            )
    for name in ("leaseDurationSeconds", "leaseTransitions"):
        value = spec.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise bad_request(f"spec.{name}: expected an integer")
    if spec.get("leaseDurationSeconds") is not None and spec["leaseDurationSeconds"] <= 0:
        _cause(
            causes,
            "FieldValueInvalid",
            "spec.leaseDurationSeconds",
            f"Invalid value: {spec['leaseDurationSeconds']}: must be greater than 0",
        )
    if spec.get("leaseTransitions") is not None and spec["leaseTransitions"] < 0:
        _cause(
            causes,
            "FieldValueInvalid",
            "spec.leaseTransitions",
            f"Invalid value: {spec['leaseTransitions']}: must be greater than or equal to 0",
        )
    holder = spec.get("holderIdentity")
    if holder is not None and not isinstance(holder, str):
        raise bad_request("spec.holderIdentity: expected a string")
    return causes


def _check_replicas(value: Any, path: str) -> list[Cause]:
    if value is None:
        return []
    if not isinstance(value, int) or isinstance(value, bool):
        raise bad_request(f"{path}: expected an integer, got {json.dumps(value)}")
    causes: list[Cause] = []
    if value < 0:
        _cause(
            causes,
            "FieldValueInvalid",
            path,
            f"Invalid value: {value}: must be greater than or equal to 0",
        )
    return causes


def _check_statefulset(statefulset: Object) -> list[Cause]:
    return _check_replicas((statefulset.get("spec") or {}).get("replicas"), "spec.replicas")


def cairn_cluster_type(schema: Object) -> ResourceType:
    def check(obj: Object) -> list[Cause]:
        return validate(schema, obj)

    return ResourceType(
        group="cairn.dev",
        version="v1",
        plural="cairnclusters",
        kind="CairnCluster",
        custom=True,
        status_subresource=True,
        tracks_generation=True,
        check=check,
    )


LEASES = ResourceType(
    group="coordination.k8s.io", version="v1", plural="leases", kind="Lease", check=_check_lease
)
PODS = ResourceType(
    group="",
    version="v1",
    plural="pods",
    kind="Pod",
    status_subresource=True,
    initial_status={"phase": "Pending"},
    field_labels=(
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "status.phase",
        "status.podIP",
    ),
)
STATEFULSETS = ResourceType(
    group="apps",
    version="v1",
    plural="statefulsets",
    kind="StatefulSet",
    status_subresource=True,
    scale_subresource=True,
    tracks_generation=True,
    initial_status={"replicas": 0, "availableReplicas": 0},
    check=_check_statefulset,
)


def _now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: Object) -> Object:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        raise bad_request("metadata must be an object")
    return metadata


def check_metadata(metadata: Object) -> list[Cause]:
    causes: list[Cause] = []
    name = metadata.get("name")
    if not name:
        _cause(causes, "FieldValueRequired", "metadata.name", "Required value: name is required")
    elif not isinstance(name, str) or len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        _cause(
            causes,
            "FieldValueInvalid",
            "metadata.name",
            f"Invalid value: {json.dumps(name)}: a lowercase RFC 1123 subdomain must consist "
            "of lower case alphanumeric characters, '-' or '.'",
        )
    for key in ("labels", "annotations"):
        entries = metadata.get(key)
        if entries is None:
            continue
        if not isinstance(entries, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in entries.items()
        ):
            raise bad_request(f"metadata.{key} must map strings to strings")
    return causes


# -- the object store and its event history ----------------------------------------


@dataclass
class _Event:
    resource_version: int
    type: str
    rtype: ResourceType
    namespace: str
    old: Object | None
    new: Object


@dataclass
class _Fault:
    status: int
    remaining: int | None  # None: until removed
    user_agent: str | None = None
    method: str | None = None
    path_contains: str | None = None

    def matches(self, method: str, path: str, user_agent: str) -> bool:
        return (
            (self.user_agent is None or self.user_agent == user_agent)
            and (self.method is None or self.method == method)
            and (self.path_contains is None or self.path_contains in path)
        )


class Store:
    """What etcd and the API server's registry keep: objects by (type, namespace,
    name), the global resourceVersion, and a bounded history of watch events."""

    def __init__(self, history_limit: int) -> None:
        self.cond = threading.Condition()
        self.objects: dict[tuple[ResourceType, str, str], Object] = {}
        self.resource_version = 0
        self.history: deque[_Event] = deque()
        self.history_limit = history_limit
        # Watches from before this resourceVersion cannot be served (410 Gone).
        self.compacted = 0
        self.closed = False
        # Bumped to end every open watch stream (`FakeKubeServer.end_watches`).
        self.watch_epoch = 0

    # All methods below expect `self.cond` to be held.

    def commit(self, kind: str, rtype: ResourceType, old: Object | None, new: Object) -> Object:
        self.resource_version += 1
        new = copy.deepcopy(new)
        metadata = new["metadata"]
        metadata["resourceVersion"] = str(self.resource_version)
        key = (rtype, metadata["namespace"], metadata["name"])
        if kind == "DELETED":
            del self.objects[key]
        else:
            self.objects[key] = new
        self.history.append(
            _Event(self.resource_version, kind, rtype, metadata["namespace"], old, new)
        )
        while len(self.history) > self.history_limit:
            self.compacted = self.history.popleft().resource_version
        self.cond.notify_all()
        return copy.deepcopy(new)

    def compact(self) -> None:
        self.history.clear()
        self.compacted = self.resource_version

    def get(self, rtype: ResourceType, namespace: str, name: str) -> Object:
        obj = self.objects.get((rtype, namespace, name))
        if obj is None:
            raise ApiError(
                404,
                "NotFound",
                f'{rtype.resource} "{name}" not found',
                rtype.details(name),
            )
        return obj

    def select(
        self, rtype: ResourceType, namespace: str | None, matchers: list[Matcher]
    ) -> list[Object]:
        return [
            copy.deepcopy(obj)
            for (kind, ns, _), obj in sorted(
                self.objects.items(), key=lambda item: (item[0][1], item[0][2])
            )
            if kind == rtype
            and (namespace is None or ns == namespace)
            and all(match(obj) for match in matchers)
        ]


# -- the HTTP layer ----------------------------------------------------------------


@dataclass
class _Route:
    rtype: ResourceType
    namespace: str | None
    name: str | None = None
    subresource: str | None = None


@dataclass
class Request:
    method: str
    path: str
    user_agent: str
    query: dict[str, str] = field(default_factory=dict)

    @property
    def is_watch(self) -> bool:
        return self.query.get("watch") in ("true", "1")


# -- authorization ---------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyRule:
    """One rule of a Role, as the RBAC authorizer reads it."""

    api_groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    resource_names: frozenset[str] = frozenset()

    def allows(self, verb: str, group: str, resource: str, name: str | None) -> bool:
        base = resource.split("/", 1)[0]
        return (
            ("*" in self.verbs or verb in self.verbs)
            and ("*" in self.api_groups or group in self.api_groups)
            and (
                "*" in self.resources
                or resource in self.resources
                # `plural/*` grants every subresource of plural (not plural itself).
                or ("/" in resource and f"{base}/*" in self.resources)
            )
            # resourceNames restrict by name; a create (no name yet) never matches them.
            and (not self.resource_names or (name is not None and name in self.resource_names))
        )


def role_rules(role: Object) -> list[PolicyRule]:
    """The rules of a Role object (as rendered YAML/JSON); non-resource URLs are
    not supported (a Role cannot hold them)."""
    if role.get("kind") != "Role" or role.get("apiVersion") != "rbac.authorization.k8s.io/v1":
        raise ValueError(f"not an rbac.authorization.k8s.io/v1 Role: {role.get('kind')}")
    return [
        PolicyRule(
            frozenset(rule.get("apiGroups") or ()),
            frozenset(rule.get("resources") or ()),
            frozenset(rule.get("verbs") or ()),
            frozenset(rule.get("resourceNames") or ()),
        )
        for rule in role.get("rules") or ()
    ]


@dataclass
class _Grant:
    user: str
    namespace: str
    rules: list[PolicyRule]


def _verb(method: str, route: _Route, query: dict[str, str]) -> str:
    if route.name is None:
        if method == "GET":
            return "watch" if query.get("watch") in ("true", "1") else "list"
        return {"POST": "create", "DELETE": "deletecollection"}.get(method, method.lower())
    return {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )


def _name_of(route: _Route, query: dict[str, str]) -> str | None:
    """The name the authorizer sees: the URL's, or for a list or watch a
    `metadata.name=` field selector's (as the API server does since 1.x)."""
    if route.name is not None:
        return route.name
    for term in _split_terms(query.get("fieldSelector", "")):
        key, _, value = term.partition("=")
        if key.strip() == "metadata.name" and not value.startswith("="):
            return value.strip()
    return None


class _HTTPServer(ThreadingHTTPServer):
    # Handler threads are joined on close; `stop()` unblocks them first.
    daemon_threads = False
    block_on_close = True

    def __init__(self, fake: FakeKubeServer) -> None:
        self.fake = fake
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def disconnect_all(self) -> None:
        with self.connections_lock:
            connections = list(self.connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by its client
                connection.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer
    # Whether the answer's status line is out (a watch stream): errors can only
    # close the connection then.
    _streaming = False

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests read `FakeKubeServer.requests` instead

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        self._streaming = False
        try:
            self._answer(method)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True  # the client went away
        except Exception as error:  # a bug in the fake: answer 500 and record it
            self.server.fake.internal_errors.append(error)
            if self._streaming:
                self.close_connection = True  # too late for a status code
            else:
                self._send_json(500, ApiError(500, "InternalError", repr(error)).status())

    def _answer(self, method: str) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        request = Request(method, url.path, self.headers.get("User-Agent", ""), query)
        fault = fake._take_fault(request)
        if fault is not None:
            if fault.status == 0:
                self.close_connection = True  # a dropped connection: no answer at all
                return
            reason = FAILURE_REASONS.get(fault.status, "InternalError")
            error = ApiError(fault.status, reason, f"injected failure ({reason})")
            self._send_json(fault.status, error.status())
            return
        try:
            body = json.loads(raw) if raw else None
            if url.path == "/version":
                if method != "GET":
                    raise _not_allowed()
                self._send_json(200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0-fake"})
                return
            route = fake._route(url.path)
            fake._authorize(request, route)
            if method == "GET" and route.name is None and request.is_watch:
                self._watch(route, query)
                return
            code, answer = fake._handle(
                method, route, query, body, self.headers.get("Content-Type", "")
            )
        except json.JSONDecodeError as error:
            code, answer = 400, bad_request(f"invalid JSON body: {error}").status()
        except ApiError as error:
            code, answer = error.code, error.status()
        self._send_json(code, answer)

    def _send_json(self, code: int, body: Object) -> None:
        payload = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _watch(self, route: _Route, query: dict[str, str]) -> None:
        fake = self.server.fake
        watch = fake._start_watch(route, query)  # may raise ApiError before any answer
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._streaming = True
        for event in watch:
            self._write_chunk(json.dumps(event).encode() + b"\n")
        self._write_chunk(b"")


@dataclass
class _Watch:
    """One watch stream's position and filters; iterating it blocks for events."""

    store: Store
    rtype: ResourceType
    namespace: str | None
    matchers: list[Matcher]
    cursor: int
    deadline: float | None  # time.monotonic(); None: until the server stops
    pending: list[Object] = field(default_factory=list)
    epoch: int = 0  # the store's watch_epoch when the watch began

    def _ended(self) -> bool:
        return (
            self.store.closed
            or self.store.watch_epoch != self.epoch
            or (self.deadline is not None and time.monotonic() >= self.deadline)
        )

    def _matches(self, obj: Object | None) -> bool:
        return obj is not None and all(match(obj) for match in self.matchers)

    def _translate(self, event: _Event) -> Object | None:
        if event.rtype != self.rtype or (
            self.namespace is not None and event.namespace != self.namespace
        ):
            return None
        was, now = self._matches(event.old), self._matches(event.new)
        if event.type == "DELETED":
            kind = "DELETED" if was else None
            obj = event.new
        elif was and now:
            kind, obj = "MODIFIED", event.new
        elif now:
            kind, obj = "ADDED", event.new
        elif was and event.old is not None:
            # Leaving the selector reads as a deletion of the old state, at the new version.
            kind, obj = "DELETED", copy.deepcopy(event.old)
            obj["metadata"]["resourceVersion"] = str(event.resource_version)
        else:
            kind = None
        return None if kind is None else {"type": kind, "object": copy.deepcopy(obj)}

    def __iter__(self) -> Iterator[Object]:
        yield from self.pending
        while True:
            with self.store.cond:
                while self.store.resource_version <= self.cursor and not self._ended():
                    timeout = None if self.deadline is None else self.deadline - time.monotonic()
                    self.store.cond.wait(timeout)
                # Behind the history (asked for it, or fell behind): it must list again.
                expired = self.cursor < self.store.compacted
                requested, compacted = self.cursor, self.store.compacted
                events = [e for e in self.store.history if e.resource_version > self.cursor]
                self.cursor = self.store.resource_version
                done = self._ended()
            # Yield outside the lock: a slow reader must not stall the whole server.
            if expired:
                yield expired_event(requested, compacted)
                return
            for event in events:
                translated = self._translate(event)
                if translated is not None:
                    yield translated
            if done:
                return


def expired_event(requested: int, oldest: int) -> Object:
    error = ApiError(410, "Expired", f"too old resource version: {requested} ({oldest})")
    return {"type": "ERROR", "object": error.status()}


class FakeKubeServer:
    """See the module docstring. Use as a context manager, or start()/stop()."""

    def __init__(self, *, crd_path: Path = CRD_PATH, history_limit: int = 1000) -> None:
        self.cairn_clusters = cairn_cluster_type(load_crd_schema(crd_path))
        self.types = {
            (rtype.group, rtype.version, rtype.plural): rtype
            for rtype in (self.cairn_clusters, LEASES, PODS, STATEFULSETS)
        }
        self.store = Store(history_limit)
        self._requests: deque[Request] = deque(maxlen=10_000)
        self.internal_errors: list[BaseException] = []
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()  # guards _faults, _requests, _grants and the records
        self._grants: dict[str, _Grant] = {}
        # (user agent, apiGroup, resource, verb) of calls RBAC allowed / refused.
        self._authorized: set[tuple[str, str, str, str]] = set()
        self._forbidden: list[tuple[str, str, str, str]] = []
        self._clients: list[kubernetes.client.ApiClient] = []
        self._http: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> FakeKubeServer:
        with self.store.cond:
            self.store.closed = False  # a restart keeps the objects, like etcd would
        self._http = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-kube"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._http is None or self._thread is None:
            return
        for client in self._clients:
            client.close()
        self._clients.clear()
        self._http.shutdown()
        self._thread.join()
        with self.store.cond:
            self.store.closed = True
            self.store.cond.notify_all()
        # Keep-alive connections block their handler threads on the next request.
        self._http.disconnect_all()
        self._http.server_close()  # joins the handler threads
        self._http = None
        self._thread = None

    def __enter__(self) -> FakeKubeServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._http is None:
            raise RuntimeError("the fake API server is not running")
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}"

    def api_client(self, user_agent: str = "cairn-tests") -> kubernetes.client.ApiClient:
        """A client of this server; closed by `stop()` if not closed before. The user
        agent tells clients apart for `fail_next(user_agent=...)` and `partition()`."""
        configuration = kubernetes.client.Configuration(host=self.url, no_proxy="*")
        client = kubernetes.client.ApiClient(configuration)
        client.user_agent = user_agent
        self._clients.append(client)
        return client

    # -- fault injection ---------------------------------------------------------------

    def fail_next(
        self,
        count: int = 1,
        status: int = 503,
        *,
        user_agent: str | None = None,
        method: str | None = None,
        path_contains: str | None = None,
    ) -> None:
        """Answer the next `count` matching requests with `status` (a Status body), or
        with no answer at all (the connection is closed) if `status` is 0."""
        with self._lock:
            self._faults.append(_Fault(status, count, user_agent, method, path_contains))

    def partition(self, user_agent: str, status: int = 503) -> None:
        """Fail every request of the client with this user agent until `heal()`."""
        with self._lock:
            self._faults.append(_Fault(status, None, user_agent))

    def heal(self, user_agent: str | None = None) -> None:
        with self._lock:
            self._faults = [
                fault
                for fault in self._faults
                if fault.remaining is not None
                or (user_agent is not None and fault.user_agent != user_agent)
            ]

    @property
    def requests(self) -> list[Request]:
        """The requests received so far (the latest 10 000), oldest first."""
        with self._lock:
            return list(self._requests)

    def _take_fault(self, request: Request) -> _Fault | None:
        with self._lock:
            self._requests.append(request)
            for fault in self._faults:
                if fault.matches(request.method, request.path, request.user_agent):
                    if fault.remaining is not None:
                        fault.remaining -= 1
                        if fault.remaining <= 0:
                            self._faults.remove(fault)
                    return fault
        return None

    # -- authorization -----------------------------------------------------------------

    def enforce_role(
        self,
        role: Object,
        *,
        user_agent: str,
        user: str | None = None,
        namespace: str = "default",
    ) -> None:
        """From now on, the client with this user agent may make only the calls the
        Role grants, in `namespace` (a RoleBinding's reach), as `user` (for the
        messages; by default the service account named like the Role)."""
        rules = role_rules(role)
        name = role.get("metadata", {}).get("name", "unknown")
        with self._lock:
            self._grants[user_agent] = _Grant(
                user or f"system:serviceaccount:{namespace}:{name}", namespace, rules
            )

    def authorized(self, user_agent: str) -> set[tuple[str, str, str]]:
        """(apiGroup, resource, verb) of every call this client was allowed."""
        with self._lock:
            return {entry[1:] for entry in self._authorized if entry[0] == user_agent}

    def forbidden(self, user_agent: str | None = None) -> list[tuple[str, str, str]]:
        """(apiGroup, resource, verb) of every call refused (of one client, or all)."""
        with self._lock:
            return [
                entry[1:]
                for entry in self._forbidden
                if user_agent is None or entry[0] == user_agent
            ]

    def _authorize(self, request: Request, route: _Route) -> None:
        with self._lock:
            grant = self._grants.get(request.user_agent)
        if grant is None:
            return  # not an enforced client: everything goes, as before
        verb = _verb(request.method, route, request.query)
        group = route.rtype.group
        resource = route.rtype.plural + (f"/{route.subresource}" if route.subresource else "")
        name = _name_of(route, request.query)
        record = (request.user_agent, group, resource, verb)
        allowed = route.namespace == grant.namespace and any(
            rule.allows(verb, group, resource, name) for rule in grant.rules
        )
        with self._lock:
            if allowed:
                self._authorized.add(record)
            else:
                self._forbidden.append(record)
        if allowed:
            return
        scope = (
            f' in the namespace "{route.namespace}"' if route.namespace else " at the cluster scope"
        )
        named = "" if name is None else f" {json.dumps(name)}"
        raise ApiError(
            403,
            "Forbidden",
            f'{route.rtype.resource}{named} is forbidden: User "{grant.user}" cannot {verb} '
            f'resource "{resource}" in API group "{group}"{scope}',
            {**route.rtype.details(name or ""), "kind": route.rtype.plural},
        )

    # -- test helpers ------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self.store.cond:
            return self.store.resource_version

    def compact(self) -> None:
        """Forget the watch history: watches from any older resourceVersion get 410."""
        with self.store.cond:
            self.store.compact()

    def end_watches(self) -> None:
        """End every open watch stream cleanly, as an API server does when it restarts
        or sheds load: clients must resume from the last version they saw."""
        with self.store.cond:
            self.store.watch_epoch += 1
            self.store.cond.notify_all()

    def get(self, rtype: ResourceType, name: str, namespace: str = "default") -> Object:
        with self.store.cond:
            return copy.deepcopy(self.store.get(rtype, namespace, name))

    def add_pod(
        self,
        name: str,
        namespace: str = "default",
        *,
        labels: dict[str, str] | None = None,
        phase: str = "Running",
        ready: bool = True,
        node_name: str = "node-0",
        pod_ip: str = "10.0.0.1",
    ) -> Object:
        pod: Object = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": self._new_metadata(name, namespace, labels),
            "spec": {
                "containers": [{"name": "storage", "image": "cairn:test"}],
                "nodeName": node_name,
            },
            "status": {"phase": phase, "podIP": pod_ip, "conditions": _pod_conditions(ready)},
        }
        with self.store.cond:
            if (PODS, namespace, name) in self.store.objects:
                raise ValueError(f"pod {namespace}/{name} exists")
            return self.store.commit("ADDED", PODS, None, pod)

    def set_pod_status(
        self,
        name: str,
        namespace: str = "default",
        *,
        phase: str | None = None,
        ready: bool | None = None,
    ) -> Object:
        """Change a pod's phase and/or Ready condition, as its kubelet would."""
        with self.store.cond:
            old = self.store.get(PODS, namespace, name)
            pod = copy.deepcopy(old)
            if phase is not None:
                pod["status"]["phase"] = phase
            if ready is not None:
                pod["status"]["conditions"] = _pod_conditions(ready)
            return self.store.commit("MODIFIED", PODS, old, pod)

    def delete_pod(self, name: str, namespace: str = "default") -> None:
        with self.store.cond:
            old = self.store.get(PODS, namespace, name)
            self.store.commit("DELETED", PODS, old, old)

    def add_statefulset(
        self,
        name: str,
        namespace: str = "default",
        *,
        replicas: int = 3,
        labels: dict[str, str] | None = None,
    ) -> Object:
        selector = labels or {"app": name}
        statefulset: Object = {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {**self._new_metadata(name, namespace, selector), "generation": 1},
            "spec": {
                "replicas": replicas,
                "serviceName": name,
                "selector": {"matchLabels": dict(selector)},
                "template": {
                    "metadata": {"labels": dict(selector)},
                    "spec": {"containers": [{"name": "storage", "image": "cairn:test"}]},
                },
            },
            "status": {"replicas": replicas, "availableReplicas": replicas},
        }
        with self.store.cond:
            if (STATEFULSETS, namespace, name) in self.store.objects:
                raise ValueError(f"statefulset {namespace}/{name} exists")
            return self.store.commit("ADDED", STATEFULSETS, None, statefulset)

    @staticmethod
    def _new_metadata(name: str, namespace: str, labels: dict[str, str] | None) -> Object:
        return {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.uuid4()),
            "creationTimestamp": _now_rfc3339(),
            "labels": dict(labels or {}),
        }

    # -- routing -----------------------------------------------------------------------

    def _route(self, path: str) -> _Route:
        parts = [part for part in path.split("/") if part]
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _not_found()
        if len(rest) == 1:
            namespace: str | None = None
            plural, name, subresource = rest[0], None, None
        elif len(rest) in (3, 4, 5) and rest[0] == "namespaces":
            namespace, plural = rest[1], rest[2]
            name = rest[3] if len(rest) > 3 else None
            subresource = rest[4] if len(rest) > 4 else None
        else:
            raise _not_found()
        rtype = self.types.get((group, version, plural))
        if rtype is None:
            raise _not_found()
        if subresource not in (None, "status", "scale") or (
            (subresource == "status" and not rtype.status_subresource)
            or (subresource == "scale" and not rtype.scale_subresource)
        ):
            raise _not_found()
        return _Route(rtype, namespace, name, subresource)

    def _handle(
        self, method: str, route: _Route, query: dict[str, str], body: Any, content_type: str
    ) -> tuple[int, Object]:
        if "dryRun" in query:
            raise bad_request("the fake API server does not support dryRun")
        if route.name is None:
            if method == "GET":
                return 200, self._list(route, query)
            if method == "POST" and route.namespace is not None:
                return 201, self._create(route.rtype, route.namespace, body)
            raise _not_allowed()
        assert route.namespace is not None
        with self.store.cond:
            if route.subresource == "scale":
                if method == "GET":
                    return 200, _scale_of(self.store.get(route.rtype, route.namespace, route.name))
                if method in ("PUT", "PATCH"):
                    return 200, self._write_scale(route, method, body, content_type)
                raise _not_allowed()
            if method == "GET":
                return 200, copy.deepcopy(self.store.get(route.rtype, route.namespace, route.name))
            if method == "PUT":
                return 200, self._update(route, body, require_version=route.rtype.custom)
            if method == "PATCH":
                current = self.store.get(route.rtype, route.namespace, route.name)
                patched = self._apply_patch(route.rtype, current, body, content_type)
                return 200, self._update(route, patched, require_version=False)
            if method == "DELETE" and route.subresource is None:
                return 200, self._delete(route, body)
        raise _not_allowed()

    # -- verbs (all but _list/_create run with the store's lock held) ----------------

    def _list(self, route: _Route, query: dict[str, str]) -> Object:
        matchers = self._matchers(route.rtype, query)
        with self.store.cond:
            items = self.store.select(route.rtype, route.namespace, matchers)
            version = self.store.resource_version
        if not route.rtype.custom:
            # Built-in lists carry their items' kind once, on the list.
            for item in items:
                item.pop("kind", None)
                item.pop("apiVersion", None)
        return {
            "apiVersion": route.rtype.api_version,
            "kind": f"{route.rtype.kind}List",
            "metadata": {"resourceVersion": str(version)},
            "items": items,
        }

    def _matchers(self, rtype: ResourceType, query: dict[str, str]) -> list[Matcher]:
        matchers: list[Matcher] = []
        if query.get("fieldSelector"):
            matchers.append(parse_field_selector(query["fieldSelector"], rtype.field_labels))
        if query.get("labelSelector"):
            matchers.append(parse_label_selector(query["labelSelector"]))
        return matchers

    def _start_watch(self, route: _Route, query: dict[str, str]) -> _Watch:
        matchers = self._matchers(route.rtype, query)
        timeout = query.get("timeoutSeconds")
        try:
            deadline = None if timeout is None else time.monotonic() + int(timeout)
        except ValueError:
            raise bad_request(f"invalid timeoutSeconds {timeout!r}") from None
        requested = query.get("resourceVersion", "")
        with self.store.cond:
            if requested in ("", "0"):
                # No version: the current objects as synthetic ADDED events first.
                items = self.store.select(route.rtype, route.namespace, matchers)
                pending = [{"type": "ADDED", "object": item} for item in items]
                return _Watch(
                    self.store,
                    route.rtype,
                    route.namespace,
                    matchers,
                    self.store.resource_version,
                    deadline,
                    pending,
                    self.store.watch_epoch,
                )
            try:
                cursor = int(requested)
            except ValueError:
                raise bad_request(f"invalid resourceVersion {requested!r}") from None
            return _Watch(
                self.store,
                route.rtype,
                route.namespace,
                matchers,
                cursor,
                deadline,
                epoch=self.store.watch_epoch,
            )

    def _decode(self, rtype: ResourceType, namespace: str, body: Any, kind: str = "") -> Object:
        """Check a request body's type, kind and namespace, as the decoder does."""
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        obj = copy.deepcopy(body)
        want_kind = kind or rtype.kind
        want_version = "autoscaling/v1" if kind == "Scale" else rtype.api_version
        if rtype.custom and not kind and ("kind" not in obj or "apiVersion" not in obj):
            raise bad_request(f"Object 'Kind' is missing in '{json.dumps(body)}'")
        obj.setdefault("kind", want_kind)
        obj.setdefault("apiVersion", want_version)
        if obj["kind"] != want_kind or obj["apiVersion"] != want_version:
            raise bad_request(
                f"the kind/apiVersion in the body ({obj['apiVersion']}, {obj['kind']}) does not "
                f"match the expected {want_version}, {want_kind}"
            )
        metadata = obj.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            raise bad_request("metadata must be an object")
        if metadata.setdefault("namespace", namespace) != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        return obj

    def _invalid(self, rtype: ResourceType, name: str, causes: list[Cause]) -> ApiError:
        listing = ", ".join(cause["message"] for cause in causes)
        summary = listing if len(causes) == 1 else f"[{listing}]"
        group = f".{rtype.group}" if rtype.group else ""
        return ApiError(
            422,
            "Invalid",
            f'{rtype.kind}{group} "{name}" is invalid: {summary}',
            {**rtype.details(name, causes=causes), "kind": rtype.kind},
        )

    def _check(self, rtype: ResourceType, obj: Object) -> None:
        causes = check_metadata(_meta(obj))
        if rtype.check is not None:
            causes += rtype.check(obj)
        if causes:
            raise self._invalid(rtype, str(_meta(obj).get("name")), causes)

    def _create(self, rtype: ResourceType, namespace: str, body: Any) -> Object:
        obj = self._decode(rtype, namespace, body)
        metadata = obj["metadata"]
        if metadata.get("resourceVersion"):
            # What the API server answers, odd as the code is.
            raise ApiError(
                500, "InternalError", "resourceVersion should not be set on objects to be created"
            )
        if rtype.initial_status is None:
            obj.pop("status", None)
        else:
            obj["status"] = copy.deepcopy(rtype.initial_status)
        for server_field in ("uid", "creationTimestamp", "generation", "deletionTimestamp"):
            metadata.pop(server_field, None)
        self._check(rtype, obj)
        name = metadata["name"]
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = _now_rfc3339()
        if rtype.tracks_generation:
            metadata["generation"] = 1
        with self.store.cond:
            if (rtype, namespace, name) in self.store.objects:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{rtype.resource} "{name}" already exists',
                    rtype.details(name),
                )
            return self.store.commit("ADDED", rtype, None, obj)

    def _check_preconditions(
        self, rtype: ResourceType, current: Object, metadata: Object, require_version: bool
    ) -> None:
        name = current["metadata"]["name"]
        uid = metadata.get("uid")
        if uid and uid != current["metadata"]["uid"]:
            raise ApiError(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                f"{current['metadata']['uid']}",
                rtype.details(name),
            )
        version = metadata.get("resourceVersion")
        if not version:
            if require_version:
                raise self._invalid(
                    rtype,
                    name,
                    [
                        {
                            "reason": "FieldValueInvalid",
                            "message": "metadata.resourceVersion: Invalid value: 0x0: must be "
                            "specified for an update",
                            "field": "metadata.resourceVersion",
                        }
                    ],
                )
            return
        if version != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rtype.resource} "{name}": the object has '
                "been modified; please apply your changes to the latest version and try again",
                rtype.details(name),
            )

    def _update(self, route: _Route, body: Any, *, require_version: bool) -> Object:
        assert route.namespace is not None and route.name is not None
        rtype = route.rtype
        current = self.store.get(rtype, route.namespace, route.name)
        obj = self._decode(rtype, route.namespace, body)
        metadata = obj["metadata"]
        if metadata.get("name", route.name) != route.name:
            raise bad_request(
                f"the name of the object ({metadata['name']}) does not match the name on the "
                f"URL ({route.name})"
            )
        self._check_preconditions(rtype, current, metadata, require_version)
        if route.subresource == "status":
            # The status subresource takes the status and nothing else.
            updated = copy.deepcopy(current)
            if "status" in obj:
                updated["status"] = obj["status"]
            else:
                updated.pop("status", None)
        else:
            updated = obj
            if rtype.status_subresource:
                # ... and the main resource takes everything but the status.
                if "status" in current:
                    updated["status"] = copy.deepcopy(current["status"])
                else:
                    updated.pop("status", None)
            for server_field in ("name", "uid", "creationTimestamp", "generation"):
                if server_field in current["metadata"]:
                    metadata[server_field] = current["metadata"][server_field]
                else:
                    metadata.pop(server_field, None)
        updated["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        # Checking also applies the schema's defaults, which the comparison must see.
        self._check(rtype, updated)
        if rtype.tracks_generation and _content(updated) != _content(current):
            updated["metadata"]["generation"] = current["metadata"]["generation"] + 1
        if updated == current:
            return copy.deepcopy(current)  # nothing changed: no new version, no event
        return self.store.commit("MODIFIED", rtype, current, updated)

    def _apply_patch(
        self, rtype: ResourceType, current: Object, patch: Any, content_type: str
    ) -> Object:
        media_type = content_type.split(";")[0].strip().lower()
        if media_type == "application/merge-patch+json" or (
            media_type == "application/strategic-merge-patch+json" and not rtype.custom
        ):
            if not isinstance(patch, dict):
                raise bad_request("a merge patch must be a JSON object")
            patched: Any = merge_patch(current, patch)
        elif media_type == "application/json-patch+json":
            patched = json_patch(current, patch)
        else:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: application/json-patch+json, application/merge-patch+json; "
                f"got {media_type!r}",
            )
        if not isinstance(patched, dict):
            raise ApiError(422, "Invalid", "the patch did not produce an object")
        return patched

    def _delete(self, route: _Route, body: Any) -> Object:
        assert route.namespace is not None and route.name is not None
        rtype = route.rtype
        current = self.store.get(rtype, route.namespace, route.name)
        preconditions = (body if isinstance(body, dict) else {}).get("preconditions") or {}
        self._check_preconditions(rtype, current, preconditions, require_version=False)
        self.store.commit("DELETED", rtype, current, current)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": rtype.details(route.name, uid=current["metadata"]["uid"]),
        }

    def _write_scale(self, route: _Route, method: str, body: Any, content_type: str) -> Object:
        assert route.namespace is not None and route.name is not None
        rtype = route.rtype
        current = self.store.get(rtype, route.namespace, route.name)
        if method == "PATCH":
            body = self._apply_patch(rtype, _scale_of(current), body, content_type)
        scale = self._decode(rtype, route.namespace, body, kind="Scale")
        self._check_preconditions(rtype, current, scale["metadata"], require_version=False)
        replicas = (scale.get("spec") or {}).get("replicas")
        causes = _check_replicas(replicas, "spec.replicas")
        if replicas is None:
            causes.append(
                {
                    "reason": "FieldValueRequired",
                    "message": "spec.replicas: Required value",
                    "field": "spec.replicas",
                }
            )
        if causes:
            raise ApiError(
                422,
                "Invalid",
                f'Scale.autoscaling "{route.name}" is invalid: '
                + ", ".join(cause["message"] for cause in causes),
                {"name": route.name, "group": "autoscaling", "kind": "Scale", "causes": causes},
            )
        if replicas == current["spec"].get("replicas"):
            return _scale_of(current)
        updated = copy.deepcopy(current)
        updated["spec"]["replicas"] = replicas
        updated["metadata"]["generation"] = current["metadata"]["generation"] + 1
        return _scale_of(self.store.commit("MODIFIED", rtype, current, updated))


def _content(obj: Object) -> Object:
    """What `metadata.generation` tracks: everything but metadata and status."""
    return {key: value for key, value in obj.items() if key not in ("metadata", "status")}


def _scale_of(statefulset: Object) -> Object:
    metadata = statefulset["metadata"]
    labels = statefulset["spec"].get("selector", {}).get("matchLabels", {})
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            key: metadata[key]
            for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
        },
        "spec": {"replicas": statefulset["spec"].get("replicas", 1)},
        "status": {
            "replicas": statefulset.get("status", {}).get("replicas", 0),
            "selector": ",".join(f"{key}={value}" for key, value in sorted(labels.items())),
        },
    }


def _pod_conditions(ready: bool) -> list[Object]:
    status = "True" if ready else "False"
    now = _now_rfc3339()
    return [
        {"type": "Ready", "status": status, "lastTransitionTime": now},
        {"type": "ContainersReady", "status": status, "lastTransitionTime": now},
    ]


def _not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def _not_allowed() -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )
