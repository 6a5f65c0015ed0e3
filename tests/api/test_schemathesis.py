"""Property-based testing of the live REST API from its own OpenAPI document (schemathesis).

A ``suanli api serve`` subprocess on loopback, in a namespace of its own; every operation
gets generated requests, valid (positive) and invalid (negative) by its schema, sent with a
valid token. Each response must not be a 5xx, must have a documented status code and
content type, and must match its documented schema. The number of cases run is printed
(run with ``-s`` to see it) and must reach a floor.
"""
from __future__ import annotations


import hypothesis
import pytest
import schemathesis
from api_helpers import TOKENS, running_api
from hypothesis import HealthCheck, Phase
from schemathesis import GenerationMode
from schemathesis.checks import (content_type_conformance, not_a_server_error, response_schema_conformance,
                                 status_code_conformance)


pytestmark = pytest.mark.stack

EXAMPLES = 30          # per operation and generation mode
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def api(stack, tmp_path_factory):
    with running_api(tmp_path_factory.mktemp("schemathesis"), partitions=1) as server:
        yield server


def test_live_openapi_document_holds_under_generated_requests(api):
    schema = schemathesis.openapi.from_url(f"{api.url}/openapi.json")
    auth = {"Authorization": f"Bearer {TOKENS['alpha']}"}
    cases: dict[str, int] = {}
    statuses: dict[int, int] = {}

    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 18          # 15 tenant operations + DrainNode, UncordonNode and SetCellPolicy (operators)
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = operation.as_strategy(generation_mode=mode)

            @hypothesis.settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                                 phases=[Phase.explicit, Phase.generate],
                                 suppress_health_check=list(HealthCheck))
            @hypothesis.given(case=strategy)
            def run(case) -> None:
                response = case.call(base_url=api.url, headers=auth)
                case.validate_response(response, checks=CHECKS)
                cases[operation.label] = cases.get(operation.label, 0) + 1
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

            try:
                run()
            except hypothesis.errors.Unsatisfiable:
                pass        # e.g. no invalid request exists for an operation without parameters

    total = sum(cases.values())
    print(f"\nschemathesis: {total} cases over {len(cases)} operations; statuses {dict(sorted(statuses.items()))}")
    assert total >= 400, cases
    assert 202 in statuses and 422 in statuses and 404 in statuses
