"""An engine is one schema row and its functions: the row names them, and they exist."""

import inspect

from specdec_collector.core import engine_figures, trust
from specdec_collector.core.counters import SCHEMA_OF, SCHEMAS, ServingEngine


def test_each_row_names_its_result_function_and_that_is_the_one_used() -> None:
    for schema in SCHEMAS:
        named = getattr(engine_figures, schema.result)
        assert engine_figures.RESULT_OF[schema.engine] is named, schema.engine
        (parameter,) = inspect.signature(named).parameters.values()
        assert parameter.annotation in ("EngineIncreases", engine_figures.EngineIncreases)


def test_each_row_names_its_intervals_or_none() -> None:
    for schema in SCHEMAS:
        if schema.intervals is None:
            assert schema.engine not in trust.INTERVALS_OF
        else:
            assert trust.INTERVALS_OF[schema.engine] is getattr(trust, schema.intervals)


def test_every_engine_but_the_recognised_variants_has_a_row() -> None:
    without = {engine for engine in ServingEngine if engine not in SCHEMA_OF}
    assert without == {ServingEngine.VLLM_V0, ServingEngine.UNRECOGNISED}
