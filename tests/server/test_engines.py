"""Which engine runs a model (`hearth.server.store.engines`), without a service: `auto`, the
per-model parameter over HEARTH_ENGINE, the sentences for choices that cannot run a model,
HEARTH_ENGINE's parsing, the `engine` option's and Modelfile line's values."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from pydantic import ValidationError

from hearth.cli.modelfile import parse_modelfile
from hearth.server.config import ConfigError, ServerConfig
from hearth.server.request_types import Options
from hearth.server.store import engines
from hearth.server.store.engines import (
    EngineChoice,
    EngineUnavailableError,
    choose_engine,
    llamacpp_installed,
)


@pytest.fixture
def no_llamacpp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engines, "llamacpp_installed", lambda: False)


@pytest.fixture
def with_llamacpp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engines, "llamacpp_installed", lambda: True)


def test_llamacpp_installed_is_whether_llama_cpp_imports() -> None:
    assert llamacpp_installed() == (importlib.util.find_spec("llama_cpp") is not None)


@pytest.mark.usefixtures("with_llamacpp")
@pytest.mark.parametrize(
    ("has_plugin", "model", "env", "expected"),
    [
        (True, None, "auto", EngineChoice("hearth", "a Hearth plugin runs architecture 'a'")),
        (False, None, "auto", EngineChoice("llamacpp", "no Hearth plugin for architecture 'a'")),
        (True, "auto", "auto", EngineChoice("hearth", "a Hearth plugin runs architecture 'a'")),
        (True, None, "llamacpp", EngineChoice("llamacpp", "HEARTH_ENGINE=llamacpp")),
        (True, "auto", "llamacpp", EngineChoice("llamacpp", "HEARTH_ENGINE=llamacpp")),
        (True, None, "hearth", EngineChoice("hearth", "HEARTH_ENGINE=hearth")),
        (
            True,
            "llamacpp",
            "hearth",
            EngineChoice("llamacpp", "the model's parameter engine=llamacpp"),
        ),
        (True, "hearth", "llamacpp", EngineChoice("hearth", "the model's parameter engine=hearth")),
        (
            False,
            "llamacpp",
            "auto",
            EngineChoice("llamacpp", "the model's parameter engine=llamacpp"),
        ),
    ],
)
def test_choice_and_reason(
    has_plugin: bool, model: str | None, env: str, expected: EngineChoice
) -> None:
    """The model's parameter (unless auto) wins over HEARTH_ENGINE, which wins over auto."""
    assert choose_engine("a", has_plugin, model, env) == expected


@pytest.mark.usefixtures("with_llamacpp")
@pytest.mark.parametrize(
    ("model", "env", "sentence"),
    [
        (
            "hearth",
            "auto",
            "the model's parameter engine=hearth asks for Hearth's engine, but no installed "
            "Hearth plugin runs architecture 'qwen2'; use engine auto or llamacpp",
        ),
        (
            None,
            "hearth",
            "HEARTH_ENGINE=hearth asks for Hearth's engine, but no installed Hearth plugin "
            "runs architecture 'qwen2'; use engine auto or llamacpp",
        ),
        ("vllm", "auto", "unknown engine 'vllm'; use one of auto, hearth, llamacpp"),
        (None, "vllm", "unknown engine 'vllm'; use one of auto, hearth, llamacpp"),
    ],
)
def test_impossible_choices_say_why(model: str | None, env: str, sentence: str) -> None:
    with pytest.raises(EngineUnavailableError) as e:
        choose_engine("qwen2", False, model, env)
    assert str(e.value) == sentence


@pytest.mark.usefixtures("no_llamacpp")
@pytest.mark.parametrize(
    ("has_plugin", "model", "env", "source"),
    [
        (False, None, "auto", "no Hearth plugin for architecture 'qwen2'"),
        (True, "llamacpp", "auto", "the model's parameter engine=llamacpp"),
        (True, None, "llamacpp", "HEARTH_ENGINE=llamacpp"),
    ],
)
def test_llamacpp_without_llama_cpp_python(
    has_plugin: bool, model: str | None, env: str, source: str
) -> None:
    with pytest.raises(EngineUnavailableError) as e:
        choose_engine("qwen2", has_plugin, model, env)
    assert str(e.value) == (
        f"{source}, and the llama.cpp engine needs llama-cpp-python, which is not installed; "
        "reinstall Hearth (./hearth builds it)"
    )


@pytest.mark.usefixtures("no_llamacpp")
def test_a_plugin_needs_no_llama_cpp_python() -> None:
    assert choose_engine("llama", True, None, "auto").engine == "hearth"


@pytest.mark.parametrize(
    ("value", "engine"),
    [("", "auto"), ("auto", "auto"), (" LlamaCpp ", "llamacpp"), ("HEARTH", "hearth")],
)
def test_hearth_engine_is_parsed(value: str, engine: str) -> None:
    assert ServerConfig.from_env({"HEARTH_ENGINE": value}).engine == engine
    assert ServerConfig.from_env({}).engine == "auto"


def test_a_bad_hearth_engine_is_a_sentence() -> None:
    with pytest.raises(ConfigError) as e:
        ServerConfig.from_env({"HEARTH_ENGINE": "vllm"})
    assert str(e.value) == "HEARTH_ENGINE='vllm' must be auto, hearth or llamacpp"


def test_the_engine_option_takes_the_choices_only() -> None:
    assert Options.model_validate({"engine": "llamacpp"}).engine == "llamacpp"
    with pytest.raises(ValidationError):
        Options.model_validate({"engine": "vllm"})


def test_a_modelfile_line_sets_the_parameter(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(b"")
    (tmp_path / "Modelfile").write_text("FROM ./m.gguf\nPARAMETER engine llamacpp\n")
    assert parse_modelfile(tmp_path / "Modelfile")["parameters"] == {"engine": "llamacpp"}
