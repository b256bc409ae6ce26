"""The curated models the "Get models" window offers: small, good chat and vision models as
GGUF files on Hugging Face, with their approximate download size and the memory they need
(weights plus a 4096-token context, rounded up). Kept in this one list.

`engine` says what runs them: "hearth" for the architectures Hearth's own plugins cover
(llama, gemma3, mllama), "llama.cpp" for the others (they need the llama.cpp engine).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CatalogEntry", "CATALOG", "FIRST_RUN_CHOICE"]


@dataclass(frozen=True)
class CatalogEntry:
    name: str  # what `hearth pull` takes
    title: str
    kind: str  # "chat" or "vision"
    download_gb: float  # approximate, model file (+ projector)
    memory_gb: float  # approximate, to run it with a 4096-token context
    architecture: str
    engine: str  # "hearth" or "llama.cpp"
    blurb: str


CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry("hf.co/ggml-org/gemma-3-1b-it-GGUF:Q4_K_M", "Gemma 3 1B Instruct", "chat",
                 0.8, 1.5, "gemma3", "hearth", "Google's smallest chat model; fast anywhere."),
    CatalogEntry("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M", "Llama 3.2 1B Instruct",
                 "chat", 0.8, 1.5, "llama", "hearth", "Meta's small assistant model."),
    CatalogEntry("hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M", "Llama 3.2 3B Instruct",
                 "chat", 2.0, 3.5, "llama", "hearth", "Better answers, still light."),
    CatalogEntry("hf.co/ggml-org/gemma-3-4b-it-GGUF:Q4_K_M", "Gemma 3 4B Instruct",
                 "vision", 3.3, 5.5, "gemma3", "hearth", "Reads images too (with its projector)."),
    CatalogEntry("hf.co/Qwen/Qwen2.5-1.5B-Instruct-GGUF:Q4_K_M", "Qwen2.5 1.5B Instruct",
                 "chat", 1.1, 2.0, "qwen2", "llama.cpp", "Alibaba's small multilingual model."),
    CatalogEntry("hf.co/Qwen/Qwen3-4B-GGUF:Q4_K_M", "Qwen3 4B", "chat", 2.5, 4.0, "qwen3",
                 "llama.cpp", "Thinks before answering; strong for its size."),
)  # fmt: skip

# What the first-run prompt offers: a real chat model the built-in engine runs.
FIRST_RUN_CHOICE = CATALOG[0]
