"""GGUF reading, and the sentences a user gets for files that cannot run."""

from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest

from hearth.engine.gguf import GGUFError, GGUFFile
from hearth.engine.model import ModelLoadError, load_model
from hearth.plugins.registry import default_registry


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _nbytes(shape, type_id):
    try:
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(type_id)]
    except ValueError:
        return 64  # an unknown type: any size, the reader refuses it first
    return int(np.prod(shape)) // block * size


def minimal_gguf(path, arch="llama", tensors=(("t.weight", (32,), 0),), extra_kv=None):
    """A hand-built GGUF v3: metadata plus tensors of (name, ggml shape, type id)."""
    kv = {"general.architecture": arch, **(extra_kv or {})}
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for k, v in kv.items():
        out += _string(k) + struct.pack("<I", 8) + _string(v)
    offset = 0
    sizes = []
    for name, shape, type_id in tensors:
        out += _string(name) + struct.pack("<I", len(shape))
        out += b"".join(struct.pack("<Q", d) for d in shape)
        out += struct.pack("<IQ", type_id, offset)
        n = _nbytes(shape, type_id)
        sizes.append(n)
        offset += (n + 31) // 32 * 32
    out += b"\0" * ((-len(out)) % 32)
    for n in sizes:
        out += b"\1" * n + b"\0" * ((-n) % 32)
    path.write_bytes(bytes(out))
    return path


def test_reads_metadata_and_tensors(tiny_llama_path):
    with GGUFFile(tiny_llama_path) as f:
        assert f.architecture == "llama"
        meta = f.metadata
        assert meta.uint("block_count") == 3  # read through the llama. prefix
        assert meta.key("block_count") == "llama.block_count"
        assert meta.string("tokenizer.ggml.model") == "llama"
        assert meta.uint("missing.key", 7) == 7
        info = f.tensors["blk.0.attn_q.weight"]
        assert info.shape == (128, 128) and info.type_name == "Q8_0"
        norm = f.tensor_numpy("blk.0.attn_norm.weight")
        assert norm.shape == (128,) and np.isfinite(norm).all()


def test_metadata_matches_the_gguf_package_reader(tiny_llama_path):
    """Our fast reader against the gguf package's own (slow but independent) reader."""
    ref = gguf.GGUFReader(str(tiny_llama_path))
    with GGUFFile(tiny_llama_path) as f:
        for key, field in ref.fields.items():
            if key.startswith("GGUF."):
                continue
            ours = f.metadata[key]
            theirs = field.contents()
            if isinstance(theirs, list):
                assert (
                    list(ours) == pytest.approx(theirs)
                    if not isinstance(theirs[0], str)
                    else list(ours) == theirs
                )
            else:
                assert (
                    ours == pytest.approx(theirs) if isinstance(theirs, float) else ours == theirs
                )
        for t in ref.tensors:
            info = f.tensors[t.name]
            assert info.offset == t.data_offset  # absolute in both readers
            assert info.nbytes == t.n_bytes
            assert list(info.shape) == [int(x) for x in t.shape]


def test_not_a_gguf_file(tmp_path):
    p = tmp_path / "model.gguf"
    p.write_bytes(b"<html>not found</html>" * 4)
    with pytest.raises(GGUFError, match="not a GGUF model file"):
        GGUFFile(p)


def test_missing_file(tmp_path):
    with pytest.raises(GGUFError, match="does not exist"):
        GGUFFile(tmp_path / "nope.gguf")


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.99])
def test_truncated_file_is_named_as_such(tiny_llama_path, tmp_path, keep):
    data = tiny_llama_path.read_bytes()
    p = tmp_path / "cut.gguf"
    p.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(GGUFError, match="truncated"):
        GGUFFile(p)


def test_corrupt_header_counts(tmp_path):
    p = tmp_path / "bad.gguf"
    p.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 2**60, 1) + b"\0" * 64)
    with pytest.raises(GGUFError, match="corrupt"):
        GGUFFile(p)


def test_unknown_tensor_type_id(tmp_path):
    p = minimal_gguf(tmp_path / "x.gguf", tensors=(("t.weight", (32,), 99),))
    with pytest.raises(GGUFError, match="type id 99"):
        GGUFFile(p)


def test_unknown_architecture_names_it_and_the_plugins(tmp_path):
    p = minimal_gguf(tmp_path / "x.gguf", arch="mamba9")
    with pytest.raises(ModelLoadError) as e:
        load_model(p, registry=default_registry())
    msg = str(e.value)
    assert "'mamba9'" in msg and "hearth_llama" in msg and "gemma3" in msg


def test_missing_tensor_names_it(tiny_llama_path, tmp_path):
    reader_src = tiny_llama_path.read_bytes()
    # Rename one tensor in place (same length) so the file stays valid but lacks it.
    bad = reader_src.replace(b"blk.1.ffn_up.weight", b"blk.1.ffn_XX.weight", 1)
    p = tmp_path / "missing.gguf"
    p.write_bytes(bad)
    with pytest.raises(GGUFError, match="lacks tensor 'blk.1.ffn_up.weight'"):
        load_model(p, registry=default_registry())


def test_unsupported_tensor_type(tmp_path):
    p = minimal_gguf(
        tmp_path / "x.gguf",
        tensors=(("token_embd.weight", (64, 4), 40),),
        extra_kv={},
    )
    f = GGUFFile(p)
    try:
        from hearth.engine.ml.ggml import GGMLBackend
        from hearth.engine.ml.weights import WeightStore

        backend = GGMLBackend(num_threads=1)
        store = WeightStore(backend, f)
        with pytest.raises(GGUFError, match="NVFP4.*cannot compute"):
            store.require("token_embd.weight")
        store.close()
        backend.close()
    finally:
        f.close()
