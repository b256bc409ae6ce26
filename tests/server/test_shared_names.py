"""Names and tables the service and the runner share are declared once: the engine kinds
(runner.protocol.EngineKind) and the K/V cache types (engine.kvcache.KVCacheType)."""

from __future__ import annotations

import typing

from hearth.engine.kvcache import KVCacheType
from hearth.engine.ml.tensor import DType
from hearth.runner.protocol import EngineKind, RunnerOptions
from hearth.server.config import ServerConfig
from hearth.server.request_types import Options
from hearth.server.store.engines import ENGINE_CHOICES


def test_the_api_option_engine_takes_exactly_the_service_choices():
    literal = typing.get_args(Options.model_fields["engine"].annotation)[0]
    assert set(typing.get_args(literal)) == set(ENGINE_CHOICES) == {"auto", *EngineKind}


def test_kv_cache_types_one_table():
    assert [t.value for t in KVCacheType] == ["f16", "q8_0", "q4_0"]
    assert [t.dtype for t in KVCacheType] == [DType.F16, DType.Q8_0, DType.Q4_0]
    # bytes per element from the block layouts: F16 2, Q8_0 34 bytes / 32, Q4_0 18 bytes / 32
    assert [t.element_bytes for t in KVCacheType] == [2.0, 34 / 32, 18 / 32]
    for t in KVCacheType:
        assert ServerConfig.from_env({"HEARTH_KV_CACHE_TYPE": t.value}).kv_cache_type == t


def test_runner_options_default_engine_is_a_kind_on_the_wire_as_its_name():
    assert RunnerOptions().engine == EngineKind.HEARTH == "hearth"
