"""Hugging Face checkpoint folder -> one GGUF file, streamed tensor by tensor.

    convert_checkpoint(folder, out, converters=default_converters(),
                       registry=default_registry(), quantize="q8_0", progress=print)

The header, metadata and tensor table are written first (every output shape and type is known
from the safetensors headers and the converter), then each tensor is read through a memory
map, transformed, cast and appended: peak memory is about one tensor in F32 plus its output
copy, whatever the model's size. A failure removes the partial file. The written file is then
opened with the plugin that registered its architecture (config and weights bound, nothing
loaded), so a file Hearth cannot run never reaches the store.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from ..engine.architecture import Architectures
from ..plugins.conversion import Converter, ConverterRegistry
from . import quantize as quant
from .checkpoint import Checkpoint, CheckpointError, open_checkpoint
from .safetensors import CheckpointTensor, read_tensor
from .tokenizer import TokenizerData, read_tokenizer
from .verify import verify_file

__all__ = [
    "OUTPUT_TYPES",
    "ConversionResult",
    "ConvertProgress",
    "OutputTensor",
    "PreparedConversion",
    "convert_checkpoint",
    "plan_conversion",
    "prepare_conversion",
]

QT = gguf.GGMLQuantizationType
# --quantize values: plain types here, quantization schemes through hearth.convert.quantize.
OUTPUT_TYPES = ("f32", "f16", "q8_0", "q4_K_M")


@dataclass(frozen=True)
class ConvertProgress:
    """Tensor `index` (1-based) of `total` written; `done` of `total_bytes` source bytes."""

    index: int
    total: int
    name: str
    done: int
    total_bytes: int


ProgressFn = Callable[[ConvertProgress], None]


@dataclass
class OutputTensor:
    """One tensor of the output file: its GGUF name, numpy shape and type, and where its data
    comes from (a checkpoint tensor, or an array the converter computed)."""

    name: str
    shape: tuple[int, ...]
    source: CheckpointTensor | None
    array: np.ndarray | None = None
    type: QT = QT.F32


@dataclass
class ConversionResult:
    path: Path
    architecture: str
    tensors: int
    parameters: int
    file_type: str
    types: dict[str, int] = field(default_factory=dict)  # type name -> tensor count


def plan_conversion(ckpt: Checkpoint, conv: Converter) -> list[OutputTensor]:
    """Every output tensor with its shape, checked against `conv.expected_shapes()`."""
    out: list[OutputTensor] = []
    source_of: dict[str, str] = {}
    for t in ckpt.tensors:
        for name in conv.tensor_names(t.name):
            if name in source_of:
                raise CheckpointError(
                    f"checkpoint tensors '{source_of[name]}' and '{t.name}' both map to '{name}'"
                )
            source_of[name] = t.name
            out.append(OutputTensor(name, tuple(conv.output_shape(name, t.shape)), t))
    for name, array in conv.extra_tensors():
        out.append(OutputTensor(name, tuple(array.shape), None, np.asarray(array, np.float32)))
    shapes = {t.name: t.shape for t in out}
    for name, want in conv.expected_shapes().items():
        if name not in shapes:
            raise CheckpointError(
                f"the checkpoint lacks the weights of '{name}', which a "
                f"{ckpt.architectures[0]} with this config.json has"
            )
        if shapes[name] != tuple(want):
            raise CheckpointError(
                f"checkpoint tensor '{source_of.get(name, name)}' has shape "
                f"{list(shapes[name])}, but config.json implies {list(want)}"
            )
    return out


def _assign_types(plan: list[OutputTensor], conv: Converter, outtype: str, arch: str) -> str:
    """Set each tensor's output type; returns the file type's name."""
    try:
        scheme = quant.parse_scheme(outtype)
    except ValueError:
        raise ValueError(
            f"cannot convert to '{outtype}': choose one of {', '.join(OUTPUT_TYPES)}"
        ) from None
    chosen = quant.quantize_plan(scheme, [quant.TensorInfo(t.name, t.shape) for t in plan], arch)
    for t in plan:
        # The converter's F32 tensors (norms, position embeddings) stay F32 in every scheme.
        t.type = QT.F32 if conv.keep_f32(t.name, t.shape) else chosen[t.name]
    return scheme.upper()


def _encode(array: np.ndarray, qtype: QT) -> np.ndarray:
    if qtype == QT.F32:
        return np.ascontiguousarray(array, dtype=np.float32)
    if qtype == QT.F16:
        return np.ascontiguousarray(array, dtype=np.float16)
    return np.asarray(quant.quantize(np.ascontiguousarray(array, np.float32), qtype))


def _nbytes(shape: tuple[int, ...], qtype: QT) -> int:
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    count = int(np.prod(shape, dtype=np.int64))
    return count // block * size


@dataclass
class PreparedConversion:
    """A checked checkpoint, ready to write: everything `convert_checkpoint` refuses before
    writing a byte has been refused by the time one exists (`prepare_conversion`)."""

    checkpoint: Checkpoint
    converter: Converter
    tokenizer: TokenizerData
    plan: list[OutputTensor]
    file_type: str

    @property
    def architecture(self) -> str:
        return self.converter.gguf_architecture

    def write(
        self,
        out: str | os.PathLike[str],
        *,
        registry: Architectures | None = None,
        progress: ProgressFn | None = None,
        name: str | None = None,
    ) -> ConversionResult:
        """Write the GGUF file `out`, then check it with `registry` (None skips the check);
        `out` is removed when either fails."""
        out = Path(out)
        try:
            _write(
                out,
                self.architecture,
                name or self.checkpoint.folder.name,
                self.converter.metadata(),
                self.tokenizer,
                self.converter,
                self.plan,
                progress,
                self.file_type,
            )
            if registry is not None:
                verify_file(out, registry)
        except BaseException:
            out.unlink(missing_ok=True)
            raise
        types: dict[str, int] = {}
        for t in self.plan:
            types[t.type.name] = types.get(t.type.name, 0) + 1
        params = sum(int(np.prod(t.shape, dtype=np.int64)) for t in self.plan)
        return ConversionResult(
            out, self.architecture, len(self.plan), params, self.file_type, types
        )


def prepare_conversion(
    folder: str | os.PathLike[str], converters: ConverterRegistry, quantize: str | None = None
) -> PreparedConversion:
    """Read and check the checkpoint in `folder` (config, weights' headers, tokenizer,
    converter, every tensor's shape and output type). Raises ValueError with a sentence."""
    ckpt = open_checkpoint(folder)
    cls = converters.get(ckpt.architectures)
    conv = cls(ckpt.config)
    try:
        conv.metadata()
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(
            f"config.json does not describe a {ckpt.architectures[0]} Hearth can convert: "
            f"{e!r} is missing or wrong"
        ) from None
    tokenizer = read_tokenizer(ckpt.folder, conv.vocab_size())
    conv.n_tokens = len(tokenizer.tokens)
    plan = plan_conversion(ckpt, conv)
    file_type = _assign_types(plan, conv, quantize or "f16", cls.gguf_architecture)
    return PreparedConversion(ckpt, conv, tokenizer, plan, file_type)


def convert_checkpoint(
    folder: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    converters: ConverterRegistry,
    registry: Architectures | None = None,
    quantize: str | None = None,
    progress: ProgressFn | None = None,
    name: str | None = None,
) -> ConversionResult:
    """Convert the checkpoint in `folder` into the GGUF file `out` (see the module docstring).

    quantize: None or "f16" (F16 matrices, F32 norms: llama.cpp's default for F16/F32
    checkpoints; BF16 ones become F16 too), "f32", "q8_0" or "q4_K_M". registry: the
    architectures that must load the result (None skips the check). Raises ValueError with a
    sentence (CheckpointError, UnsupportedCheckpointError) before writing anything when it
    can, and removes `out` when a later step fails.
    """
    prepared = prepare_conversion(folder, converters, quantize)
    return prepared.write(out, registry=registry, progress=progress, name=name)


_FILE_TYPES = {"F32": 0, "F16": 1, "Q8_0": 7, "Q4_K_M": 15}  # llama.cpp's LlamaFileType


def _write(
    out: Path,
    arch: str,
    name: str,
    metadata: dict[str, Any],
    tokenizer: TokenizerData,
    conv: Converter,
    plan: list[OutputTensor],
    progress: ProgressFn | None,
    file_type: str,
) -> None:
    writer = gguf.GGUFWriter(out, arch)
    try:
        writer.add_name(name)
        writer.add_file_type(_FILE_TYPES[file_type])
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        for key, value in metadata.items():
            _add(writer, key, value)
        tokenizer.write(writer)
        for key, value in conv.tokenizer_keys(tokenizer.model).items():
            _add(writer, key, value)
        for t in plan:
            raw = None if t.type in (QT.F32, QT.F16) else t.type
            dtype = {QT.F32: np.float32, QT.F16: np.float16}.get(t.type, np.uint8)
            shape = t.shape if raw is None else gguf.quant_shape_to_byte_shape(t.shape, t.type)
            writer.add_tensor_info(t.name, shape, np.dtype(dtype), _nbytes(t.shape, t.type), raw)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        total_bytes = sum(t.source.nbytes for t in plan if t.source is not None)
        done = 0
        for i, t in enumerate(plan, 1):
            if t.source is not None:
                array = read_tensor(t.source)
                done += t.source.nbytes
            else:
                assert t.array is not None
                array = t.array
            array = conv.transform(t.name, array)
            if tuple(array.shape) != t.shape:
                raise ValueError(
                    f"the converter made '{t.name}' {list(array.shape)}, not {list(t.shape)}"
                )
            data = _encode(array, t.type)
            del array
            writer.write_tensor_data(data)
            del data
            if progress is not None:
                progress(ConvertProgress(i, len(plan), t.name, done, total_bytes))
    finally:
        writer.close()


def _add(writer: gguf.GGUFWriter, key: str, value: Any) -> None:
    """One metadata key with the GGUF type llama.cpp uses for such a Python value."""
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        writer.add_uint32(key, value) if value >= 0 else writer.add_int32(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, str):
        writer.add_string(key, value)
    elif isinstance(value, (list, tuple)):
        writer.add_array(key, list(value))
    else:
        raise TypeError(f"metadata key {key} has a value of type {type(value).__name__}")
