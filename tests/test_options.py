"""Each option declared once (hearth.options, RunnerOptions' field metadata), and what is made
from the declarations: the service's request record, the runner's command line and parser,
the `hearth run` flags and the rules for when a loaded runner cannot serve a request."""

from __future__ import annotations

import argparse
from dataclasses import fields, replace

import pytest

from hearth.cli import build_parser
from hearth.cli.terminal_chat import request_options
from hearth.engine.kvcache.types import KVCacheType
from hearth.options import GenerationOptions, LoadOptions, default
from hearth.runner.protocol import CompletionOptions, EngineKind, RunnerOptions
from hearth.server.request_types import RUNTIME_OPTIONS, Options

# Ollama's documented defaults (docs/modelfile.md, api.md), which Hearth keeps.
OLLAMA = {
    "temperature": 0.8,
    "top_k": 40,
    "top_p": 0.9,
    "min_p": 0.0,
    "seed": -1,
    "repeat_penalty": 1.1,
    "repeat_last_n": 64,
    "num_predict": -1,
    "num_keep": 4,
}


def test_the_declared_defaults_are_ollamas():
    assert {name: default(name) for name in OLLAMA} == OLLAMA


def test_the_request_record_has_every_declared_option_and_no_other():
    declared = {f.name for cls in (GenerationOptions, LoadOptions) for f in fields(cls)}
    assert set(Options.model_fields) == declared | {"typical_p"}
    assert {f.name for f in fields(CompletionOptions)} == {
        f.name for f in fields(GenerationOptions)
    }
    assert declared - RUNTIME_OPTIONS == CompletionOptions.names()


@pytest.mark.parametrize(
    ("option", "bad"),
    [("temperature", -0.1), ("top_p", 1.5), ("num_ctx", 0), ("draft_model", ""), ("seed", -2)],
)
def test_the_declared_ranges_are_checked(option, bad):
    with pytest.raises(ValueError, match=option):
        Options.model_validate({option: bad})


def test_every_runner_option_survives_its_command_line():
    """Every field away from its default, written by args() and read by `hearth runner`'s
    parser, comes back the same."""
    odd = RunnerOptions(
        num_ctx=1000, parallel=3, num_batch=64, threads=5, flash_attention=True,
        kv_type=KVCacheType.Q8_0, memory_limit=1 << 30, projector="/p.gguf",
        engine=EngineKind.LLAMACPP, layout='{"gpus": []}', draft_model="/d.gguf",
    )  # fmt: skip
    assert all(getattr(odd, f.name) != f.default for f in fields(RunnerOptions))
    for options in (odd, RunnerOptions()):
        args = build_parser().parse_args(["runner", "--model", "m.gguf", *options.args()])
        assert RunnerOptions(**{f.name: getattr(args, f.name) for f in fields(options)}) == options
    assert "--draft-model" not in RunnerOptions().args()


def test_hearth_run_flags_become_the_request_options_the_user_set():
    argv = ["run", "m", "--temperature", "0.5", "--top-k", "3", "--threads", "2",
            "--num-ctx", "512", "--flash-attention"]  # fmt: skip
    assert request_options(build_parser().parse_args(argv)) == {
        "temperature": 0.5, "top_k": 3, "num_thread": 2, "num_ctx": 512, "flash_attention": True,
    }  # fmt: skip
    assert request_options(build_parser().parse_args(["run", "m"])) == {}


def test_hearth_run_help_shows_the_declared_defaults():
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {a.option_strings[0]: a.help for a in sub.choices["run"]._actions if a.option_strings}
    for flag, shown in (("--temperature", "0.8"), ("--top-k", "40"), ("--num-ctx", "4096")):
        assert helps[flag].endswith(f"(default {shown})")


HAVE = RunnerOptions(num_ctx=4096, num_batch=512, threads=4, projector="/p", draft_model="/d")


@pytest.mark.parametrize(
    ("want", "explicit", "reloads"),
    [
        ({"num_ctx": 2048}, set(), None),  # a smaller context fits
        ({"num_ctx": 8192}, set(), "num_ctx"),
        ({"flash_attention": True}, set(), "flash_attention"),
        ({"kv_type": KVCacheType.Q8_0}, set(), "kv_type"),
        ({"engine": EngineKind.LLAMACPP}, set(), "engine"),
        ({"projector": None}, set(), None),  # not asked for
        ({"projector": "/q"}, set(), "projector"),
        ({"draft_model": None}, set(), None),  # same text without one: only speed differs
        ({"draft_model": "/e"}, set(), "draft_model"),
        ({"num_batch": 128}, set(), None),  # from the model's parameters: no reload
        ({"num_batch": 128}, {"num_batch"}, "num_batch"),
        ({"threads": 2}, set(), None),
        ({"threads": 2}, {"num_thread"}, "threads"),
        ({"parallel": 4, "memory_limit": 5, "layout": "{}"}, set(), None),
    ],
)
def test_when_a_loaded_runner_cannot_serve_a_request(want, explicit, reloads):
    assert HAVE.reloads(replace(HAVE, **want), frozenset(explicit)) == reloads
