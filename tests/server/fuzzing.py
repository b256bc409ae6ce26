"""The schema fuzz run both fuzz tests share: every operation of the service's OpenAPI schema,
`examples` generated requests each, most of them naming a model the service has."""

from __future__ import annotations

from collections.abc import Callable

import schemathesis
from hypothesis import HealthCheck, given, settings


def naming(model: str) -> Callable[[schemathesis.Case], schemathesis.Case]:
    """Most generated names are invalid or unknown: use `model` in two cases of three, so
    fuzzed options, messages and formats reach the generation code."""

    def use(case: schemathesis.Case) -> schemathesis.Case:
        body = case.body
        if isinstance(body, dict) and "model" in body and len(str(body["model"])) % 3:
            body["model"] = model
        return case

    return use


def fuzz(
    schema: schemathesis.BaseSchema,
    examples: int,
    model: str,
    check: Callable[[schemathesis.Case], None],
) -> int:
    """Call `check` on `examples` generated cases of every operation; returns how many
    operations there were."""
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation in operations:

        @given(case=operation.as_strategy().map(naming(model)))
        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        def run(case: schemathesis.Case) -> None:
            check(case)

        run()
    return len(operations)
