"""Zip packages (DOCX) checked before a library unpacks them: a zip bomb (a small file whose
parts unpack to gigabytes) is refused with a sentence, in bounded memory.

`check_package` refuses a package
- whose central directory (the list of its parts) is over `MAX_DIRECTORY_BYTES`, read from
  its end record before the directory is parsed (a parser holds an object per part);
- whose parts declare more than `MAX_UNPACKED_BYTES` in all;
- whose parts that unpack to more than `DENSE_RATIO` times their packed size (Word's own XML
  packs 5-20 to 1; a flood of one repeated tag, 1000 to 1) declare more than
  `MAX_DENSE_BYTES` in all: python-docx parses every XML part into a tree (about 40 bytes of
  memory per byte of `<w:p/>`s) and walks every paragraph, so a small file of dense XML under
  the total would still cost gigabytes and minutes;
- whose parts, decompressed chunk by chunk (memory: one chunk, nothing kept), give more than
  a part declares or more than `MAX_UNPACKED_BYTES` in all: a zip can lie in its headers.
  (CPython's zipfile itself stops a part at its declared size, and then its checksum fails:
  that is a damaged file, which the caller reports.)

A package that passes unpacks, with any zip reader, to at most `MAX_UNPACKED_BYTES`.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from .limits import DocumentError

__all__ = [
    "DENSE_RATIO",
    "MAX_DENSE_BYTES",
    "MAX_DIRECTORY_BYTES",
    "MAX_UNPACKED_BYTES",
    "check_package",
]

MAX_UNPACKED_BYTES = 256 * 2**20  # all parts together, unpacked
MAX_DIRECTORY_BYTES = 4 * 2**20  # the list of parts: ~90,000 of them at most (46+ bytes each)
DENSE_RATIO = 100  # a part that unpacks to more than this many times its packed size is dense
MAX_DENSE_BYTES = 8 * 2**20  # dense parts, unpacked, in all
_CHUNK = 1 << 20


def _size(n: int) -> str:
    if n >= 2**30:
        return f"{n / 2**30:,.1f} GiB"
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{max(n, 1) / 2**10:,.0f} KiB"


def _directory_size(path: Path) -> int:
    """The size of the zip's list of parts (its central directory) as its end record declares
    it, read before `zipfile` reads the list; 0 when no end record is found (then `zipfile`
    refuses the file). The end record is the last `PK\\5\\6` in the file's final 64 KiB + 22
    bytes (its comment is at most 64 KiB); the size is its 4 bytes at offset 12 (0xFFFFFFFF:
    ZIP64, whose record gives 8 bytes at offset 40, from the locator 20 bytes before)."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        length = f.tell()
        start = max(0, length - (65535 + 22))
        f.seek(start)
        tail = f.read()
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) - at < 22:
            return 0
        size = int.from_bytes(tail[at + 12 : at + 16], "little")
        if size != 0xFFFFFFFF or at < 20 or tail[at - 20 : at - 16] != b"PK\x06\x07":
            return size
        f.seek(int.from_bytes(tail[at - 12 : at - 4], "little"))
        record = f.read(56)
        if record[:4] != b"PK\x06\x06":
            return size
        return int.from_bytes(record[40:48], "little")


def check_package(path: Path, kind: str) -> None:
    """Raise `DocumentError` with a sentence when the zip at `path` (a `kind`, e.g. "Word
    document") would unpack past the bounds (module docstring). A file that is not a zip, or
    whose data is corrupt, raises what `zipfile` raises (`BadZipFile`, `zlib.error`, ...)."""
    directory = _directory_size(path)
    if directory > MAX_DIRECTORY_BYTES:
        raise DocumentError(
            f"{path.name} lists too many parts (its list of parts is "
            f"{_size(directory)}); Hearth reads {kind}s whose list is at "
            f"most {_size(MAX_DIRECTORY_BYTES)}."
        )
    with zipfile.ZipFile(path) as zf:
        parts = zf.infolist()
        declared = sum(p.file_size for p in parts)
        if declared > MAX_UNPACKED_BYTES:
            raise DocumentError(
                f"{path.name} unpacks to {_size(declared)}; Hearth reads {kind}s that unpack to "
                f"at most {_size(MAX_UNPACKED_BYTES)} (so much packed into a "
                f"{_size(path.stat().st_size)} file may be a zip bomb)."
            )
        dense = [p for p in parts if p.file_size > DENSE_RATIO * max(p.compress_size, 1)]
        unpacked = sum(p.file_size for p in dense)
        if unpacked > MAX_DENSE_BYTES:
            packed = sum(p.compress_size for p in dense)
            raise DocumentError(
                f"{path.name} has parts that unpack to {_size(unpacked)} from {_size(packed)}, "
                f"more than {DENSE_RATIO} times their packed size; Hearth reads {kind}s with at "
                f"most {_size(MAX_DENSE_BYTES)} of such parts (this may be a zip bomb)."
            )
        for part in parts:
            got = 0
            with zf.open(part) as stream:
                while chunk := stream.read(_CHUNK):
                    got += len(chunk)  # the parts' sum is at most the checked total
                    if got > part.file_size:
                        raise DocumentError(
                            f"{path.name} is damaged: its part {part.filename[:100]} unpacks "
                            f"to more than the {part.file_size:,} bytes it declares."
                        )
