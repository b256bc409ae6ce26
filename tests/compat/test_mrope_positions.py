"""The loop's positions mapped onto llama.cpp's for M-RoPE images, by mtmd's rule: an image of
`rows` embeddings advances its sequence's position by `n_pos` (`mtmd_helper_decode_image_chunk`
sets `n_past += mtmd_input_chunk_get_n_pos(chunk)`), text by one per token."""

from __future__ import annotations

import numpy as np

from hearth.llamacpp.positions import MRopePositions


def _mtmd_positions(chunks: list[tuple[str, int, int]]) -> list[int]:
    """llama.cpp's first position of every loop input, the way mtmd's helper counts n_past:
    chunks are ("text", n, n) or ("image", rows, n_pos); an image's rows all start at n_past."""
    out: list[int] = []
    n_past = 0
    for kind, rows, n_pos in chunks:
        if kind == "text":
            out += list(range(n_past, n_past + rows))
        else:
            out += [n_past] * rows
        n_past += n_pos
    return out


def _apply(m: MRopePositions, seq: int, chunks: list[tuple[str, int, int]]) -> list[int]:
    """Feed the chunks as the engine does (images reported when decoded); the real first
    position of every input."""
    out: list[int] = []
    pos = 0
    for kind, rows, n_pos in chunks:
        if kind == "text":
            out += m.real_rows(np.full(rows, seq), np.arange(pos, pos + rows)).tolist()
        else:
            out += [m.real(seq, pos)] * rows
            m.image_done(seq, pos + rows, rows, n_pos)
        pos += rows
    return out


CHUNKS = [("text", 5, 5), ("image", 16, 4), ("text", 3, 3), ("image", 9, 3), ("text", 4, 4)]


def test_positions_follow_mtmds_count():
    m = MRopePositions()
    assert _apply(m, 1, CHUNKS) == _mtmd_positions(CHUNKS)
    assert m.real(0, 30) == 30  # another sequence has no images


def test_removing_and_copying_keep_what_stays():
    m = MRopePositions()
    _apply(m, 0, CHUNKS)
    m.copy(0, 2, 5 + 16 + 3)  # sequence 2 holds the first text, image and text
    expected = _mtmd_positions(CHUNKS[:3])
    text = [*range(5), *range(21, 24)]  # (inside an image only its first row has a meaning)
    assert [m.real(2, p) for p in [*text, 5]] == [expected[p] for p in [*text, 5]]
    # what follows in sequence 2 is new: text after the first image's offset
    assert m.real(2, 24) == 5 + 4 + 3
    m.truncate(0, 5)  # sequence 0 keeps only its first text; its images are gone
    assert m.real(0, 5) == 5 and m.real(0, 40) == 40
    # an image decoded again where it was gives the same positions
    assert _apply(m, 0, CHUNKS) == _mtmd_positions(CHUNKS)
