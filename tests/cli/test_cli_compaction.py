"""`hearth run` compacts a chat that outgrows its context: a subprocess with scripted stdin,
the default model, a 512-token context. The notice is printed, `/summary` shows the summary,
the turn after compaction fits (its whole prompt under num_ctx, nothing cut by the service),
and `/undo` puts the original turns back into the prompt (so the next turn, which cannot fit
them, is compacted again)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from hearth.history.compaction import NOTICE

from support.paths import REPO

pytestmark = pytest.mark.slow

FACTS = [
    "My name is Ada Lovelace and I live in the town of Ockham, where I keep three goats.",
    "We decided that the garden shed will be painted green before the end of May.",
    "My brother Charles Babbage repairs clocks; his workshop is on Marchmont Street.",
    "Open question: should the goats move to the north field this winter or stay put?",
    "Also, the goats are called Flora, Hazel and Pip, and Pip is the youngest of the three.",
    "Finally, my favourite tea is Earl Grey, and I drink it at four o'clock every afternoon.",
]
FILLER = (
    " I am telling you this so that you remember it later in our conversation, because I will"
    " come back to it and ask you about it; for now please reply in one short sentence only,"
    " there is no need to explain anything or to ask me anything."
)


def test_hearth_run_compacts_shows_the_summary_and_undoes(gemma3_path, tmp_path):
    questions = [f + FILLER for f in FACTS]
    script = [*questions, "What is my name?", "/summary", "/undo", "Thanks!", "/bye"]
    args = ["run", "gemma3:270m", "--num-ctx", "512", "--num-predict", "16"]
    args += ["--temperature", "0", "--seed", "1", "--verbose"]
    proc = subprocess.run(
        [sys.executable, "-m", "hearth", *args],
        input="\n".join(script) + "\n",
        capture_output=True,
        text=True,
        timeout=1500,  # three summaries and seven replies on a busy two-core machine
        env=dict(os.environ, HEARTH_HOME=str(tmp_path / "home")),
        cwd=REPO,
    )
    err = proc.stderr
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "cut to fit the context" not in err, err  # the service never had to truncate
    prompts = [int(n) for n in re.findall(r"^prompt: (\d+) tokens", err, flags=re.M)]
    assert len(prompts) == len(questions) + 2 and max(prompts) < 512, err
    # compacted before /summary (six long turns cannot fit 512 tokens) ...
    first = err.index(NOTICE)
    assert first < err.index("Summary of the first"), err
    # ... and the turn right after it is smaller than the one before
    after = int(re.search(r"^prompt: (\d+) tokens", err[first:], flags=re.M).group(1))
    before = [int(n) for n in re.findall(r"^prompt: (\d+) tokens", err[:first], flags=re.M)]
    assert after < before[-1], err
    summary = err.split("Summary of the first", 1)[1].split("\n(", 1)[0]
    assert len(summary.strip()) > 20, err
    # /undo puts the originals back, so the next turn cannot fit and is compacted again
    undone = err.index("the summary was undone")
    assert NOTICE in err[undone:], err
