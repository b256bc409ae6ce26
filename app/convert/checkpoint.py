"""A Hugging Face checkpoint folder: config.json, safetensors weights (one file, or shards
named by model.safetensors.index.json), and a tokenizer. Opening one checks what is there
and names what is missing."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .safetensors import CheckpointTensor, read_header

__all__ = ["Checkpoint", "CheckpointError", "is_checkpoint", "open_checkpoint"]

INDEX = "model.safetensors.index.json"


class CheckpointError(ValueError):
    """A folder that is not a convertible checkpoint (the message says what is missing)."""


@dataclass(frozen=True)
class Checkpoint:
    folder: Path
    config: dict[str, Any]
    tensors: list[CheckpointTensor]  # shard by shard, in file order

    @property
    def architectures(self) -> list[str]:
        archs = self.config.get("architectures") or []
        return [str(a) for a in archs] if isinstance(archs, list) else []

    @property
    def largest_tensor(self) -> int:
        return max((t.nbytes for t in self.tensors), default=0)

    @property
    def weight_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


def is_checkpoint(folder: Path) -> bool:
    """Whether `folder` looks like a Hugging Face checkpoint (a config.json and weights)."""
    return (
        folder.is_dir() and (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))
    )


def _shards(folder: Path) -> list[Path]:
    index = folder / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            names = sorted(set(weight_map.values()))
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise CheckpointError(f"{INDEX} in {folder} is damaged (no weight_map)") from None
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise CheckpointError(
                f"the folder {folder} lacks weight shard(s) {', '.join(missing)} named in {INDEX}"
            )
        return [folder / n for n in names]
    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        raise CheckpointError(
            f"the folder {folder} has no weights (no *.safetensors file; pytorch .bin "
            "checkpoints are not converted)"
        )
    return shards


def open_checkpoint(folder: str | os.PathLike[str]) -> Checkpoint:
    """Read `folder`'s config and the safetensors headers (no weights). Raises CheckpointError
    naming what is missing or damaged; the tokenizer is checked when it is converted."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder")
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"the folder {folder} has no config.json")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"config.json in {folder} is not valid JSON: {e}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"config.json in {folder} is not a JSON object")
    tensors: list[CheckpointTensor] = []
    seen: dict[str, Path] = {}
    for shard in _shards(folder):
        try:
            header = read_header(shard)
        except ValueError as e:
            raise CheckpointError(str(e)) from None
        for t in header:
            if t.name in seen:
                raise CheckpointError(
                    f"tensor '{t.name}' is in both {seen[t.name].name} and {shard.name}"
                )
            seen[t.name] = shard
            tensors.append(t)
    if not tensors:
        raise CheckpointError(f"the weights in {folder} hold no tensors")
    return Checkpoint(folder, config, tensors)
