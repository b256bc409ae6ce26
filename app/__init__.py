"""Hearth: a local-LLM desktop app with its own GGUF engine."""

__version__ = "0.1.0"
