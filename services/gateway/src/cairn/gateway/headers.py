"""HTTP header values: versions as ETags, preconditions, content negotiation,
and text that must travel in a header. Pure.

A record's version id is its entity tag: a strong ETag `"<version_id>"`.
Preconditions (RFC 9110, section 13) map onto the store's conditional writes:

    If-Match: "<v>"     the record must exist at version v      expected_version=v
    If-Match: *         the record must exist (any version)
    If-None-Match: *    the record must not exist (create only)  expected_version=-1
    If-None-Match: "<v>" (reads) answer 304 while the version is v

Weak tags (`W/"..."`) never match a strong comparison, so they are refused as
a malformed precondition rather than silently failing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from urllib.parse import quote, unquote

# Bound on an If-Match / If-None-Match list: a request naming more versions
# than this is malformed, not a real precondition.
MAX_ENTITY_TAGS = 32
# Version ids are int64: 18 digits always fit.
MAX_VERSION_DIGITS = 18

# The header values, as patterns (the OpenAPI document states them). The HTTP
# server strips the whitespace around a header value before these apply.
_TAG = f'"[0-9]{{1,{MAX_VERSION_DIGITS}}}"'
ONE_TAG_OR_ANY_PATTERN = rf"^(\*|{_TAG})$"
TAGS_OR_ANY_PATTERN = rf"^(\*|{_TAG}(, ?{_TAG}){{0,{MAX_ENTITY_TAGS - 1}}})$"
ANY_PATTERN = r"^\*$"


class HeaderError(ValueError):
    """A header value the gateway cannot honour as written."""


def etag(version_id: int) -> str:
    return f'"{version_id}"'


@dataclass(frozen=True, slots=True)
class EntityTags:
    """A parsed If-Match / If-None-Match value: `*`, or a list of version ids."""

    any: bool
    versions: tuple[int, ...] = ()

    def matches(self, version_id: int | None) -> bool:
        """`version_id` None: the record does not exist."""
        if version_id is None:
            return False
        return self.any or version_id in self.versions


def parse_entity_tags(value: str) -> EntityTags:
    text = value.strip()
    if text == "*":
        return EntityTags(any=True)
    versions = []
    for part in text.split(","):
        tag = part.strip()
        if not tag:
            continue
        if tag.startswith("W/"):
            raise HeaderError(f"weak entity tag {tag} cannot match a version")
        if len(tag) < 3 or tag[0] != '"' or tag[-1] != '"':
            raise HeaderError(f'malformed entity tag {tag!r}: expected "<version>" or *')
        inner = tag[1:-1]
        if not inner.isascii() or not inner.isdigit() or len(inner) > MAX_VERSION_DIGITS:
            raise HeaderError(f"entity tag {tag} is not a version of this API")
        versions.append(int(inner))
    if not versions:
        raise HeaderError("empty entity tag list")
    if len(versions) > MAX_ENTITY_TAGS:
        raise HeaderError(f"more than {MAX_ENTITY_TAGS} entity tags")
    return EntityTags(any=False, versions=tuple(versions))


class WriteCondition(enum.Enum):
    NONE = "none"
    VERSION = "version"  # exists at exactly this version
    EXISTS = "exists"  # exists, any version
    ABSENT = "absent"  # does not exist
    NEVER = "never"  # If-Match and If-None-Match: * together: no record satisfies both


@dataclass(frozen=True, slots=True)
class Precondition:
    condition: WriteCondition
    version_id: int | None = None


def write_precondition(if_match: str | None, if_none_match: str | None) -> Precondition:
    """The precondition of a write (PUT, DELETE) from its headers."""
    if if_none_match is not None:
        tags = parse_entity_tags(if_none_match)
        if not tags.any:
            raise HeaderError("writes take If-None-Match: * only (create only)")
        if if_match is not None:
            # Checked for form, then failed (RFC 9110 evaluates both; "exists"
            # and "does not exist" cannot both hold).
            write_precondition(if_match, None)
            return Precondition(WriteCondition.NEVER)
        return Precondition(WriteCondition.ABSENT)
    if if_match is not None:
        tags = parse_entity_tags(if_match)
        if tags.any:
            return Precondition(WriteCondition.EXISTS)
        if len(tags.versions) != 1:
            raise HeaderError("a conditional write names exactly one version")
        return Precondition(WriteCondition.VERSION, tags.versions[0])
    return Precondition(WriteCondition.NONE)


JSON = "application/json"
OCTET_STREAM = "application/octet-stream"


def prefers_json(accept: str | None) -> bool:
    """Whether a read should answer the JSON record rather than the raw value
    (application/octet-stream, the default): when the client names
    application/json and ranks it above application/octet-stream."""
    if not accept:
        return False
    json_q = octet_q = None
    wildcard_q = 0.0
    for item in accept.split(","):
        parts = [p.strip() for p in item.split(";")]
        media = parts[0].lower()
        q = 1.0
        for parameter in parts[1:]:
            name, _, number = parameter.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(number)
                except ValueError:
                    q = 0.0
        if media == JSON:
            json_q = q
        elif media == OCTET_STREAM:
            octet_q = q
        elif media in ("*/*", "application/*"):
            wildcard_q = max(wildcard_q, q)
    if json_q is None or json_q <= 0:
        return False
    if octet_q is not None:
        return json_q > octet_q
    # Named explicitly beside a wildcard ("application/json, */*", as many HTTP
    # libraries send): the named type is what the client is after.
    return json_q >= wildcard_q


def header_text(text: str) -> str:
    """Text (a key, a client identity) as a header value: percent-encoded UTF-8,
    since header values are ASCII. Readers undo it with `unquote`."""
    return quote(text, safe="/:@!$&'()*+,;=-._~")


def text_from_header(value: str) -> str:
    return unquote(value)
