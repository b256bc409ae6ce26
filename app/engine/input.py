"""What goes into a forward pass: inputs (tokens or multimodal items) and batches.

`Input` is one entry of a sequence as the KV cache sees it: a token id, or a placeholder
position that carries multimodal embeddings. `Multimodal` is an encoded item (an image), and
declares the positions it fills; `image_positions` lays a prompt's images out as those
positions. `PassInput` is what a caller hands an engine for one forward pass (host arrays, one
row per input); `Batch` is that pass as the plugin's graph sees it, its tensors living in the
pass's graph context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .ml.tensor import Tensor

__all__ = ["Input", "Multimodal", "PassInput", "Batch", "image_positions", "sequence_runs"]


def sequence_runs(
    ids: np.ndarray, lone_rows: frozenset[int] = frozenset()
) -> list[tuple[int, int]]:
    """(start, count) of each run of equal sequence ids in a batch; the rows of the
    sequences in `lone_rows` each make a run of their own (see `PassInput.lone_rows`)."""
    n = len(ids)
    one_run = n == 1 or (n and ids[0] == ids[-1] and (ids == ids[0]).all())  # (decoding)
    if one_run and (n == 1 or not lone_rows or int(ids[0]) not in lone_rows):
        return [(0, n)]
    cuts = [0, *(np.flatnonzero(np.diff(ids)) + 1).tolist(), n]
    runs = [(a, b - a) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    if not lone_rows:
        return runs
    split: list[tuple[int, int]] = []
    for start, count in runs:
        if count > 1 and int(ids[start]) in lone_rows:
            split.extend((start + i, 1) for i in range(count))
        else:
            split.append((start, count))
    return split


@dataclass
class PassInput:
    """The rows of one forward pass, as an engine's `plan()` and `forward()` take them.

    tokens: the input of each row: a token id, or a negative multimodal placeholder
        (`multimodal_store.placeholder`: image N's position K).
    positions: each row's position in its sequence.
    sequences: each row's sequence (the KV-cache sequence: a runner's slot id).
    outputs: the rows whose outputs are wanted, in the order they come back.
    hidden: return the final normed hidden states of those rows (embeddings) instead of
        logits.
    lone_rows: sequences whose rows are each computed as a lone decoding row is (their own
        attention run over the sequence's cells, their own weight products where a kernel
        treats a lone row apart: invariance.py), so that each row's logits have the bits
        that decoding the rows one pass at a time gives. Speculative decoding's check of
        drafted tokens (runner/loop.py) relies on it.
    greedy: the caller wants only each output row's most likely token (numpy's argmax of its
        logits: the lowest id among equal maxima): `ForwardEngine.run` then returns `[n_outputs]`
        int32 token ids instead of logits, picked in the graph where that saves copying the
        logits over (engine/greedy.py).

    Arrays of any integer type; the engine converts them to int32.
    """

    tokens: np.ndarray
    positions: np.ndarray
    sequences: np.ndarray
    outputs: np.ndarray
    hidden: bool = False
    lone_rows: frozenset[int] = frozenset()
    greedy: bool = False


@dataclass
class Multimodal:
    """An encoded item (an image, a tile, ...) as the plugin's `encode_multimodal` builds it:
    `tensor` `[embd, rows]` (its graph not yet computed) plus opaque plugin `data`, and how
    it fills a prompt's input positions (`positions`, `token`): the core lays the prompt out
    from these (`image_positions`).

    bidirectional: the item's rows attend to each other both ways (an image's tokens in
        Gemma 3), on top of the causal mask; set by the plugin.
    rows: how many embedding rows the item has (`tensor`'s second dimension); the core
        sets it, and keeps it when the tensor itself is gone (an item recalled from the
        multimodal store on a later turn has `tensor` None).
    positions: how many input positions the item fills. 0 (Gemma 3): one per row, and the
        rows replace those positions' token embeddings. N > 0 (mllama's cross-attention
        states, N = 1): the item fills N positions that embed `token` as text, and its rows
        reach `forward` whole, as a `Batch.multimodal` entry at the first of them.
    token: the token id of the positions the item fills: what the prompt's inputs show
        there (Gemma 3's `<image_soft_token>`), and what they embed when `positions` > 0
        (mllama's `<|image|>`); with `positions` 0 the rows replace its embedding.

    In a `Batch`, `tensor` is instead the item's computed embeddings as a graph input: the
    rows it fills in that batch (`positions` 0), or all its rows (`positions` > 0).
    """

    tensor: Tensor | None
    data: Any = None
    bidirectional: bool = False
    rows: int = 0
    positions: int = 0
    token: int = 0

    @property
    def span(self) -> int:
        """The input positions the item fills (`positions`, else one per row)."""
        return self.positions or self.rows


@dataclass
class Input:
    """One cache position. `same_batch` = the next N inputs must share this input's batch."""

    token: int = 0
    multimodal: list[Multimodal] | None = None
    multimodal_hash: int = 0
    same_batch: int = 0


def image_positions(inputs: list[Input]) -> list[Input]:
    """A prompt's inputs with each image laid out as the positions its items fill.

    An image comes as one input whose `multimodal` holds its items (their `rows` set) and
    whose `multimodal_hash` identifies it; it becomes `item.span` positions per item, each
    with `item.token`: the first carries the items, the hash and `same_batch` = the image's
    positions - 1 (the image is evaluated in one batch), the others the hash alone. Other
    inputs pass through; `inputs` is not changed."""
    out: list[Input] = []
    for inp in inputs:
        if not inp.multimodal:
            out.append(inp)
            continue
        tokens = [item.token for item in inp.multimodal for _ in range(item.span)]
        if not tokens:
            raise ValueError("an image whose items fill no positions (their rows unset)")
        h = inp.multimodal_hash
        out.append(
            Input(
                token=tokens[0],
                multimodal=inp.multimodal,
                multimodal_hash=h,
                same_batch=len(tokens) - 1,
            )
        )
        out.extend(Input(token=t, multimodal_hash=h) for t in tokens[1:])
    return out


@dataclass
class Batch:
    """One forward pass.

    tokens: I32 `[n]` input token ids (values may be filled in after the graph is built).
    positions: I32 `[n]` positions; `positions_host` holds the same values on the host.
    sequences: the sequence id of each input (host).
    outputs: I32 `[n_outputs]` indices of the rows whose logits are wanted.
    multimodal: (input index, items) pairs: the items' embeddings replace the token
        embeddings of rows index, index + 1, ... (`item.tensor` `[embd, rows]`, in order);
        an item with `positions` > 0 instead comes whole (`[embd, item.rows]`) at the row
        of its first position, and replaces nothing (the plugin uses it as it likes).
    multimodal_rows, multimodal_embd: the same as two tensors, I32 `[m]` row indices and
        `[embd, m]` embeddings (None when the batch has no multimodal rows), for
        `ctx.set_rows(hidden, multimodal_embd, multimodal_rows)`.
    bidirectional: (first row, count) runs of rows that attend to each other both ways.
    hidden: the model returns `[embd, n_outputs]` hidden states (after the output norm)
        instead of logits; used for embeddings.
    """

    tokens: Tensor
    positions: Tensor
    outputs: Tensor
    positions_host: np.ndarray
    sequences: np.ndarray
    outputs_host: np.ndarray
    multimodal: list[tuple[int, list[Multimodal]]] = field(default_factory=list)
    multimodal_rows: Tensor | None = None
    multimodal_embd: Tensor | None = None
    bidirectional: list[tuple[int, int]] = field(default_factory=list)
    hidden: bool = False  # return the final (normed) hidden states instead of logits
    runs: list[tuple[int, int]] | None = None  # sequence_runs(sequences), when known

    @property
    def size(self) -> int:
        return len(self.positions_host)

    @property
    def n_outputs(self) -> int:
        return len(self.outputs_host)
