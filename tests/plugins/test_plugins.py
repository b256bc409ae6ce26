"""The plugin system: registry rules, autoloading, a third-party plugin, and import hygiene."""

from __future__ import annotations

import ast
import logging
import textwrap
from pathlib import Path

import gguf
import numpy as np
import pytest

import hearth.plugins as plugins_api
from hearth.plugins import ArchitectureSpec, hookimpl, testing
from hearth.plugins.manager import BUILTIN_PLUGINS, create_plugin_manager
from hearth.plugins.registry import (
    ArchitectureRegistry,
    DuplicateArchitectureError,
    UnknownArchitectureError,
    build_registry,
)
from hearth.plugins.testing import add_spm_vocab
from hearth_llama.model import Config as LlamaConfig
from hearth_llama.model import Model as LlamaModel
from hearth_qwen2.model import Model as Qwen2Model

REPO = Path(__file__).resolve().parents[2]

FAKE_PLUGIN = '''
"""A third-party architecture: a bigram model (logits = output @ embedding[token])."""
from dataclasses import dataclass

from hearth.plugins import Architecture, ArchitectureSpec, Tensor, bind, hookimpl, weight


@dataclass(frozen=True)
class Config:
    vocab: int

    @classmethod
    def from_gguf(cls, meta):
        return cls(len(meta.strings("tokenizer.ggml.tokens")))


@dataclass
class Weights:
    token_embd: Tensor = weight(matmul=False)
    output: Tensor = weight()


class Model(Architecture[Config]):
    def __init__(self, config, weights):
        super().__init__(config, weights)
        self.w = bind(Weights, weights)

    def forward(self, ctx, batch, cache):
        h = ctx.get_rows(self.w.token_embd, batch.tokens)
        h = ctx.get_rows(h, batch.outputs)
        return ctx.mul_mat(self.w.output, h)


@hookimpl
def register_architectures(register):
    register(ArchitectureSpec(name="bigram", config=Config, model=Model))
'''


@pytest.fixture
def fake_dist(tmp_path, monkeypatch):
    """Install `hearth_bigram` as if by pip: a package plus a dist-info with an entry point."""
    site = tmp_path / "site"
    pkg = site / "hearth_bigram"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE_PLUGIN)
    info = site / "hearth_bigram-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hearth-bigram\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[hearth.plugins]\nbigram = hearth_bigram\n")
    monkeypatch.syspath_prepend(str(site))
    return pkg


def test_builtins_register_llama_and_gemma3():
    registry = build_registry(create_plugin_manager(autoload=False))
    assert {"llama", "gemma3"} <= set(registry.names())
    assert registry.owner("gemma3") == "hearth_gemma3"


def test_registry_refuses_a_duplicate_naming_both_plugins():
    reg = ArchitectureRegistry()
    reg.register(ArchitectureSpec("x", LlamaConfig, LlamaModel), "first")
    with pytest.raises(DuplicateArchitectureError, match="'first'.*'second'"):
        reg.register(ArchitectureSpec("x", LlamaConfig, LlamaModel), "second")


def test_registry_refuses_a_model_that_is_not_an_architecture():
    class Duck:
        def forward(self, ctx, batch, cache): ...

    with pytest.raises(TypeError, match="plugin quack.*'duck'.*not a subclass of .*Architecture"):
        ArchitectureRegistry().register(ArchitectureSpec("duck", LlamaConfig, Duck), "quack")


class Clash:
    """A third-party plugin that registers a built-in architecture's name."""

    def __init__(self, name: str = "llama") -> None:
        self.name = name

    @hookimpl
    def register_architectures(self, register):
        register(ArchitectureSpec(self.name, LlamaConfig, Qwen2Model))


def test_a_third_party_plugin_overrides_a_builtin_one_with_a_log_line(caplog):
    pm = create_plugin_manager(autoload=False)
    pm.register(Clash(), name="clash")
    with caplog.at_level(logging.WARNING, logger="hearth.plugins"):
        registry = build_registry(pm)
    assert registry.get("llama").model is Qwen2Model and registry.owner("llama") == "clash"
    assert registry.overridden == {"llama": "hearth_llama"}
    assert "plugin 'clash' overrides the built-in plugin 'hearth_llama' for architecture " \
        "'llama'" in caplog.text  # fmt: skip


def test_the_override_holds_whichever_registers_first(caplog):
    registry = ArchitectureRegistry(builtins=("builtin",))
    registry.register(ArchitectureSpec("x", LlamaConfig, Qwen2Model), "third")
    registry.register(ArchitectureSpec("x", LlamaConfig, LlamaModel), "builtin")
    assert registry.get("x").model is Qwen2Model and registry.owner("x") == "third"
    assert "plugin 'third' overrides the built-in plugin 'builtin'" in caplog.text


def test_two_third_party_plugins_for_one_name_fail_naming_both():
    pm = create_plugin_manager(autoload=False)
    pm.register(Clash("x"), name="first")
    pm.register(Clash("x"), name="second")
    with pytest.raises(DuplicateArchitectureError, match="'first'.*'second'|'second'.*'first'"):
        build_registry(pm)


def test_unknown_architecture_lists_what_is_installed():
    registry = build_registry(create_plugin_manager(autoload=False))
    with pytest.raises(UnknownArchitectureError, match="'rwkv9'.*gemma3.*llama"):
        registry.get("rwkv9")


def test_misspelled_hook_fails_loudly():
    class Typo:
        @hookimpl
        def register_architecture(self, register):  # missing "s"
            pass

    pm = create_plugin_manager(autoload=False)
    pm.register(Typo(), name="typo")
    with pytest.raises(Exception, match="register_architecture"):
        pm.check_pending()


def test_third_party_plugin_is_autoloaded(fake_dist):
    registry = build_registry(create_plugin_manager())
    assert "bigram" in registry.names()
    assert registry.owner("bigram") == "bigram"


def test_disable_plugins_env_stops_autoloading(fake_dist, monkeypatch):
    monkeypatch.setenv("HEARTH_DISABLE_PLUGINS", "1")
    registry = build_registry(create_plugin_manager())
    assert "bigram" not in registry.names()
    assert "llama" in registry.names()  # built-ins stay


def _write_bigram(path: Path) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    w = gguf.GGUFWriter(str(path), "bigram")
    n_vocab = add_spm_vocab(w)
    emb = rng.standard_normal((n_vocab, 32)).astype(np.float32)
    out = rng.standard_normal((n_vocab, 32)).astype(np.float32)
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("output.weight", out)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return emb, out


def test_a_model_loads_and_runs_through_the_third_party_plugin(fake_dist, tmp_path):
    from hearth.engine.forward import ForwardEngine
    from hearth.engine.input import PassInput
    from hearth.engine.model import load_model
    from hearth.plugins.registry import default_registry

    emb, out = _write_bigram(tmp_path / "bigram.gguf")
    loaded = load_model(tmp_path / "bigram.gguf", registry=default_registry(), num_threads=1)
    assert loaded.architecture == "bigram"
    engine = ForwardEngine(loaded, num_ctx=256, num_batch=16)
    try:
        tokens = np.array([5, 17, 42], dtype=np.int32)
        logits = engine.forward(PassInput(tokens, np.arange(3), np.zeros(3), np.array([0, 2])))
    finally:
        engine.close()
        loaded.close()
    expected = emb[[5, 42]] @ out.T
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)


def test_conformance_skips_parity_for_an_architecture_llama_cpp_does_not_know(fake_dist, tmp_path):
    from hearth.plugins.testing import run_conformance

    report = run_conformance(_write_bigram, tmp_path)
    status = {r.name: (r.status, r.detail) for r in report.results}
    assert status["parity"][0] == "skipped" and "'bigram'" in status["parity"][1]
    assert status["shift"][0] == "skipped"  # the bigram model does not override shift
    assert {status[c][0] for c in ("batch", "sequences", "cache_reuse")} == {"passed"}


def _is_test_code(path: Path) -> bool:
    """A plugin's tests and test helpers, which also use the conformance suite."""
    return path.name == "testing.py" or "tests" in path.parts


def _hearth_imports(path: Path) -> list[tuple[str, str | None]]:
    """(module, name) of each import of Hearth in `path` (name None for `import module`)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.module, a.name) for a in node.names]
    return [(m, n) for m, n in found if m == "hearth" or m.startswith("hearth.")]


def _forbidden(paths) -> list[str]:
    """Imports of Hearth other than `from hearth.plugins import NAME` (NAME in its
    `__all__`), and in test code `from hearth.plugins.testing import NAME`."""
    surfaces = {"hearth.plugins": set(plugins_api.__all__)}
    bad = []
    for path in paths:
        allowed = surfaces | (
            {"hearth.plugins.testing": set(testing.__all__)} if _is_test_code(path) else {}
        )
        for module, name in _hearth_imports(path):
            if name not in allowed.get(module, ()):
                what = module if name is None else f"{name} from {module}"
                bad.append(f"{path}: imports {what}")
    return bad


def test_plugins_import_only_the_public_api():
    files = sorted((REPO / "plugins").rglob("*.py")) + sorted((REPO / "examples").rglob("*.py"))
    assert any("hearth_granite" in f.parts for f in files), "no plugin sources found"
    assert _forbidden(files) == []
    assert {Path(m).name for m in BUILTIN_PLUGINS} == {
        "hearth_llama",
        "hearth_gemma3",
        "hearth_mllama",
        "hearth_qwen2",
        "hearth_qwen3",
        "hearth_phi3",
        "hearth_qwen3moe",
        "hearth_gpt_oss",
    }


def test_the_purity_check_catches_imports_beside_the_kit(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        textwrap.dedent(
            """\
            import hearth.plugins
            from hearth.engine.kvcache.causal import Causal
            from hearth.plugins import Block, default_registry
            from hearth.plugins.images import decode
            from hearth.plugins.testing import run_conformance
            """
        )
    )
    assert _forbidden([bad]) == [
        f"{bad}: imports hearth.plugins",
        f"{bad}: imports Causal from hearth.engine.kvcache.causal",
        f"{bad}: imports default_registry from hearth.plugins",
        f"{bad}: imports decode from hearth.plugins.images",
        f"{bad}: imports run_conformance from hearth.plugins.testing",
    ]
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_x.py").write_text("from hearth.plugins.testing import run_conformance\n")
    assert _forbidden([tests / "test_x.py"]) == []


def test_the_installer_bundles_every_builtin_plugin():
    """installer/hearth.spec's PLUGINS (collected into the frozen app) is BUILTIN_PLUGINS."""
    spec = ast.parse((REPO / "installer" / "hearth.spec").read_text())
    (listed,) = [
        ast.literal_eval(node.value)
        for node in spec.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "PLUGINS" for t in node.targets)
    ]
    assert tuple(listed) == BUILTIN_PLUGINS
