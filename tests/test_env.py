"""hearth.env: every HEARTH_* variable is declared once, read through its typed readers, and
documented in the README's table; one boolean parser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hearth import env
from hearth.server.config import ConfigError, ServerConfig

REPO = Path(__file__).resolve().parents[1]
SOURCES = [p for d in ("app", "plugins") for p in (REPO / d).rglob("*.py")]
# a read of the environment that names a HEARTH_ variable (or a constant holding one) directly
DIRECT_READ = re.compile(
    r"""(environ\.get|getenv|environ\[)\(?\s*(["']HEARTH_|[A-Z_]+_ENV\b)(?![^\n]*\]\s*=[^=])"""
)


def test_no_module_reads_a_hearth_variable_but_through_hearth_env():
    found = [
        f"{p.relative_to(REPO)}:{i}: {line.strip()}"
        for p in SOURCES
        if p.name != "env.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if DIRECT_READ.search(line)
    ]
    assert found == []


def test_the_pattern_finds_direct_reads():
    """The check above can fail: these lines are reads; writes for child processes are not."""
    for line in ('x = os.environ.get("HEARTH_OFFLINE", "")', "os.getenv('HEARTH_X')",
                 "t = os.environ.get(TOKEN_ENV)", 'v = os.environ["HEARTH_HOME"]'):  # fmt: skip
        assert DIRECT_READ.search(line), line
    for line in ('env["HEARTH_API_KEY"] = token', 'env.pop("HEARTH_HOST", None)'):
        assert not DIRECT_READ.search(line), line


def test_every_variable_the_code_names_is_declared_and_in_the_readme_table():
    declared = {v.name for v in env.VARIABLES}
    named = {
        m for p in SOURCES for m in re.findall(r"\bHEARTH_[A-Z0-9_]*[A-Z0-9]\b", p.read_text())
    }
    assert named - declared == set(), "used but not declared in hearth.env.VARIABLES"
    table = "\n".join(
        line
        for line in (REPO / "README.md").read_text().splitlines()
        if line.startswith("| `HEARTH")
    )
    missing = {name for name in declared if f"`{name}`" not in table}
    assert missing == set(), "declared but not in the README's settings table"


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "yes", "On", " on "])
def test_flag_on(value):
    assert env.flag("HEARTH_OFFLINE", {"HEARTH_OFFLINE": value}) is True


@pytest.mark.parametrize("value", ["", "0", "false", "No", "off"])
def test_flag_off(value):
    assert env.flag("HEARTH_OFFLINE", {"HEARTH_OFFLINE": value}) is False
    assert env.flag("HEARTH_OFFLINE", {}) is False


def test_a_malformed_flag_is_a_sentence_naming_it():
    with pytest.raises(env.EnvError, match=r"^HEARTH_OFFLINE='maybe' is not on or off"):
        env.flag("HEARTH_OFFLINE", {"HEARTH_OFFLINE": "maybe"})


def test_an_undeclared_name_is_a_programming_error():
    with pytest.raises(KeyError, match="HEARTH_NOPE is not declared"):
        env.text("HEARTH_NOPE", {})


def test_whole_and_choice():
    assert env.whole("HEARTH_MAX_QUEUE", 512, env={}) == 512
    assert env.whole("HEARTH_MAX_QUEUE", 512, env={"HEARTH_MAX_QUEUE": " 7 "}) == 7
    with pytest.raises(env.EnvError, match="HEARTH_MAX_QUEUE='x' is not a whole number"):
        env.whole("HEARTH_MAX_QUEUE", 512, env={"HEARTH_MAX_QUEUE": "x"})
    with pytest.raises(env.EnvError, match="must be at least 4"):
        env.whole("HEARTH_CONTEXT_LENGTH", 4096, 4, {"HEARTH_CONTEXT_LENGTH": "2"})
    engines = ("auto", "hearth", "llamacpp")
    assert env.choice("HEARTH_ENGINE", engines, "auto", {"HEARTH_ENGINE": "LlamaCpp"}) == "llamacpp"
    with pytest.raises(env.EnvError, match="must be auto, hearth or llamacpp"):
        env.choice("HEARTH_ENGINE", engines, "auto", {"HEARTH_ENGINE": "vllm"})


@pytest.mark.parametrize(
    ("value", "want"),
    [("", env.CpuKernels.ON), ("1", env.CpuKernels.ON), ("on", env.CpuKernels.ON),
     ("0", env.CpuKernels.OFF), ("off", env.CpuKernels.OFF), ("AVX2", env.CpuKernels.AVX2)],
)  # fmt: skip
def test_cpu_kernels_is_parsed_one_way(value, want):
    assert env.cpu_kernels({"HEARTH_CPU_KERNELS": value}) is want


@pytest.mark.parametrize(
    "name",
    ["HEARTH_OFFLINE", "HEARTH_CPU_KERNELS", "HEARTH_STREAM_INTERVAL_MS", "HEARTH_RUNNER_LOG"],
)
def test_the_service_refuses_to_start_with_a_malformed_setting_its_children_read(name):
    with pytest.raises(ConfigError, match=f"^{name}="):
        ServerConfig.from_env({name: "sometimes"})
