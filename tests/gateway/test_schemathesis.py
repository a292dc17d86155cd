"""A property-based run of the gateway's OpenAPI document against the live
gateway of a local cluster (schemathesis): every operation gets generated
requests, valid and invalid (its examples, coverage and fuzzing phases), and
every answer must be no server error (5xx) and within the document (status,
content type, headers, body schema).

The document is built from the gateway's code at collection time, since
pytest parametrizes before any fixture runs (schemathesis' fixture-loaded
schemas do not work with this pytest); `test_the_live_document_is_the_one_tested`
checks that the live gateway serves exactly this document.

Excluded: the mutating admin actions (PUT/POST/DELETE under /v1/admin). Random
calls would scale the test cluster's pods, change its replication factor and
drain its nodes at random; they have their own end-to-end tests
(test_admin.py). The admin views are included (the cluster has a controller).
"""

from __future__ import annotations

import re

import httpx
import hypothesis
import pytest
import schemathesis
from schemathesis.generation.case import Case
from schemathesis.specs.openapi.checks import positive_data_acceptance

from cairn.gateway.app import create_app
from cairn.gateway.settings import GatewaySettings
from gateway.helpers import LocalClusterProcess, wait_until

pytestmark = pytest.mark.e2e

# Per operation and phase: enough to reach every parameter's edge cases, few
# enough that the whole run takes about a minute on two cores.
MAX_EXAMPLES = 100
# The change feed is an endless stream: a generated request that leaves its
# length open gets this bound, so that each answer ends.
FEED_DURATION_MS = 200

# The document of a gateway without auth, as the cluster's gateway runs (no
# storage is contacted to build it).
DOCUMENT = create_app(GatewaySettings(storage_addresses=("127.0.0.1:1",))).openapi()

# A request the document allows may still fail on the store's state: a version
# that is not the record's (412), a resume point past the retention (410).
# Those are answers to valid requests, not refusals of them.
CONFIG = schemathesis.config.SchemathesisConfig.from_dict(
    {
        "checks": {
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "3xx", "401", "403", "404", "409", "410", "412", "429"]
            }
        }
    }
)
schema = schemathesis.openapi.from_dict(DOCUMENT, config=CONFIG).exclude(
    method=["PUT", "POST", "DELETE"], path_regex=r"^/v1/admin/"
)
# Opaque tokens the gateway issued: any string fits their schema, but only the
# gateway's own decode (else 400), which no schema can state.
TOKEN_QUERY_PARAMETERS = ("cursor", "session", "since")
TOKEN_HEADERS = ("last-event-id",)


def carries_a_token(case: Case) -> bool:
    query = case.query or {}
    headers = {name.lower(): value for name, value in (case.headers or {}).items()}
    return any(query.get(name) for name in TOKEN_QUERY_PARAMETERS) or any(
        headers.get(name) for name in TOKEN_HEADERS
    )


def breaks_a_header_pattern(case: Case) -> bool:
    """A header value its documented pattern refuses, in a case schemathesis
    counts as valid: its coverage phase fills patterned headers it cannot
    generate with `0` (seen with schemathesis 4.32)."""
    # (The coverage phase also sends methods the path does not document.)
    operation = DOCUMENT["paths"][case.operation.path].get(case.method.lower(), {})
    headers = {name.lower(): value for name, value in (case.headers or {}).items()}
    for parameter in operation.get("parameters", []):
        pattern = parameter["schema"].get("pattern")
        value = headers.get(parameter["name"].lower())
        if parameter["in"] != "header" or not pattern or value is None:
            continue
        if not re.search(pattern, str(value)):
            return True
    return False


def duplicates_an_index(case: Case) -> bool:
    """A put or sequence put naming one secondary index twice (400: the store takes
    one secondary key per index and put; the schema cannot say "distinct prefixes")."""
    entries = (case.query or {}).get("index")
    if not isinstance(entries, list):
        return False
    names = [str(entry).partition(":")[0] for entry in entries]
    return len(names) != len(set(names))


@pytest.fixture(scope="module")
def gateway_url(cluster: LocalClusterProcess) -> str:
    url = cluster.banner.gateway_url
    with httpx.Client(base_url=url, timeout=30) as http:
        wait_until(lambda: http.get("/readyz").status_code == 200, 60)
        wait_until(lambda: all(s["leader"] for s in http.get("/v1/admin/shards").json()), 60)
    return url


def test_the_live_document_is_the_one_tested(gateway_url: str) -> None:
    assert httpx.get(f"{gateway_url}/openapi.json", timeout=30).json() == DOCUMENT


@schema.parametrize()
@hypothesis.settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(hypothesis.HealthCheck),
    database=None,
)
def test_the_gateway_answers_within_its_openapi_document(case: Case, gateway_url: str) -> None:
    if case.operation.path.endswith("/changes"):
        query = dict(case.query or {})
        query.setdefault("max_duration_ms", FEED_DURATION_MS)
        case.query = query
    excluded = []
    if carries_a_token(case) or breaks_a_header_pattern(case) or duplicates_an_index(case):
        excluded.append(positive_data_acceptance)
    case.call_and_validate(base_url=gateway_url, timeout=60, excluded_checks=excluded)
