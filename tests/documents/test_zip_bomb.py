"""A DOCX whose parts unpack to gigabytes (a zip bomb) is refused with a sentence, in bounded
memory: the sizes its headers declare, the sizes its parts really unpack to (a zip can lie)
and the length of its list of parts are checked before python-docx reads it. Peak memory is
measured in a subprocess (`ru_maxrss`) against the same reader on an ordinary DOCX."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from make_documents import bomb_docx, declare_size, headed_docx

from hearth.documents import DocumentError, read_document
from hearth.documents import packages as packages_module

GiB = 2**30

READ = textwrap.dedent(
    """
    import resource, sys
    from pathlib import Path
    from hearth.documents import DocumentError, read_document
    try:
        doc = read_document(Path(sys.argv[1]))
        print("READ", len(doc.sections))
    except DocumentError as e:
        print("REFUSED", e)
    print("PEAK", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    """
)


def _read_in_subprocess(path: Path) -> tuple[str, int]:
    """What reading `path` says (its first line) and the process's peak memory (bytes)."""
    out = subprocess.run(
        [sys.executable, "-c", READ, str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ.copy(),
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    return lines[0], int(lines[-1].removeprefix("PEAK "))


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1 GiB of document.xml packed into about 1 MiB."""
    return bomb_docx(tmp_path_factory.mktemp("bomb") / "bomb.docx", GiB)


@pytest.mark.slow
def test_a_docx_that_unpacks_to_a_gigabyte_is_refused_in_bounded_memory(bomb, tmp_path):
    assert bomb.stat().st_size < 2 * 2**20  # small on disk: far under the 64 MiB limit
    said, peak = _read_in_subprocess(bomb)
    assert re.fullmatch(
        r"REFUSED bomb\.docx unpacks to 1\.0 GiB; Hearth reads Word documents that unpack to "
        r"at most 256 MiB \(so much packed into a [12] MiB file may be a zip bomb\)\.",
        said,
    ), said
    plain, baseline = _read_in_subprocess(headed_docx(tmp_path / "plain.docx"))
    assert plain == "READ 4"
    assert peak < baseline + 64 * 2**20, (peak, baseline)  # nothing near the 1 GiB was held


@pytest.mark.slow
def test_a_docx_whose_headers_understate_its_parts_is_refused_in_bounded_memory(bomb, tmp_path):
    liar = tmp_path / "liar.docx"
    liar.write_bytes(bomb.read_bytes())
    declare_size(liar, "word/document.xml", 4096)  # says 4 KiB, holds 1 GiB
    said, peak = _read_in_subprocess(liar)
    assert said.startswith("REFUSED liar.docx is damaged")
    plain, baseline = _read_in_subprocess(headed_docx(tmp_path / "plain.docx"))
    assert peak < baseline + 64 * 2**20, (peak, baseline)


def test_the_parts_are_read_at_most_to_the_size_they_declare(tmp_path, monkeypatch):
    """The check's own bound, whatever the zip reader does past a part's declared size: a
    reader that gives more than declared is caught by the count."""
    liar = bomb_docx(tmp_path / "liar.docx", 3 * 2**20, declared=4096)
    real_open = zipfile.ZipFile.open

    def open_believing_the_data(self, name, mode="r", pwd=None, **kw):
        stream = real_open(self, name, mode, pwd, **kw)
        if getattr(name, "filename", name) == "word/document.xml":
            stream._left = 1 << 40  # as a reader that does not stop at the declared size
            stream._expected_crc = None
        return stream

    monkeypatch.setattr(zipfile.ZipFile, "open", open_believing_the_data)
    with pytest.raises(DocumentError) as refused:
        packages_module.check_package(liar, "Word document")
    assert str(refused.value) == (
        "liar.docx is damaged: its part word/document.xml unpacks to more than the 4,096 bytes "
        "it declares."
    )


def test_a_docx_of_dense_parts_under_the_total_is_refused(tmp_path, monkeypatch):
    """12 MiB of one repeated byte (under the 256 MiB total, ~1000 to 1) is refused before
    python-docx parses it; with a higher bound, python-docx is what refuses it."""
    dense = bomb_docx(tmp_path / "dense.docx", 12 * 2**20)
    with pytest.raises(DocumentError) as refused:
        read_document(dense)
    assert re.fullmatch(
        r"dense\.docx has parts that unpack to 12 MiB from \d+ KiB, more than 100 times their "
        r"packed size; Hearth reads Word documents with at most 8 MiB of such parts \(this may "
        r"be a zip bomb\)\.",
        str(refused.value),
    ), str(refused.value)
    monkeypatch.setattr(packages_module, "MAX_DENSE_BYTES", 16 * 2**20)
    with pytest.raises(DocumentError, match=r"^dense\.docx is damaged: Start tag expected"):
        read_document(dense)  # let past the check, python-docx parses it: it is not XML


def test_a_docx_listing_too_many_parts_is_refused_before_they_are_listed(tmp_path, monkeypatch):
    many = headed_docx(tmp_path / "many.docx")
    with zipfile.ZipFile(many, "a") as z:
        for i in range(200):  # empty parts
            z.writestr(f"extra/part{i}.xml", b"")
    assert read_document(many).sections  # under the real bound it reads
    monkeypatch.setattr(packages_module, "MAX_DIRECTORY_BYTES", 4096)
    with pytest.raises(DocumentError, match=r"^many\.docx lists too many parts \(its list of "
                       r"parts is \d+ KiB\); Hearth reads Word documents whose list is at most "
                       r"4 KiB\.$"):  # fmt: skip
        read_document(many)


def test_an_ordinary_docx_is_read_as_before(tmp_path):
    doc = read_document(headed_docx(tmp_path / "trial.docx"))
    assert doc.sections[0].label == "Field Trial Report"
