"""The pieces of a SentencePiece `tokenizer.model` (a protobuf `ModelProto`), read without
the sentencepiece or protobuf packages: field 1 holds the pieces (each a `SentencePiece`
message: 1 piece, 2 score, 3 type)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["Piece", "read_pieces"]

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


@dataclass(frozen=True)
class Piece:
    text: str
    score: float
    type: int  # SentencePiece's enum: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, ...


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int, bytes | int]]:
    """(field number, wire type, value) of one message's top-level fields."""
    out: list[tuple[int, int, bytes | int]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        value: bytes | int
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = int.from_bytes(data[pos : pos + 8], "little"), pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"unknown wire type {wire}")
        if pos > len(data):
            raise ValueError("truncated")
        out.append((field, wire, value))
    return out


def read_pieces(data: bytes, name: str = "tokenizer.model") -> list[Piece]:
    """The model's pieces in id order. Raises ValueError for a file that is not one."""
    try:
        pieces = []
        for field, wire, value in _fields(data):
            if field != 1 or wire != 2:
                continue
            assert isinstance(value, bytes)
            text, score, kind = "", 0.0, NORMAL
            for f, w, v in _fields(value):
                if f == 1 and w == 2:
                    assert isinstance(v, bytes)
                    text = v.decode("utf-8")
                elif f == 2 and w == 5:
                    assert isinstance(v, int)
                    score = struct.unpack("<f", v.to_bytes(4, "little"))[0]
                elif f == 3 and w == 0:
                    assert isinstance(v, int)
                    kind = v
            pieces.append(Piece(text, score, kind))
    except (ValueError, UnicodeDecodeError, AssertionError):
        raise ValueError(f"{name} is not a SentencePiece model") from None
    if not pieces:
        raise ValueError(f"{name} is not a SentencePiece model (it has no pieces)")
    return pieces
