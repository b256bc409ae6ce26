"""Installed models, from /api/tags plus /api/show for each (capabilities, context, memory)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt

__all__ = [
    "CAPABILITY_NAMES",
    "CAPABILITY_TIPS",
    "ModelRow",
    "ModelListModel",
    "human_bytes",
    "parse_parameters",
]

_Index = QModelIndex | QPersistentModelIndex


def human_bytes(n: float | None) -> str:
    if not n:
        return "—"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB") else f"{n:.1f} {unit}"
        n /= 1024
    return "—"


def _human_count(n: int | None) -> str:
    if not n:
        return "—"
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.1f}".rstrip("0").rstrip(".") + unit
    return str(n)


_VISION_FAMILIES = ("clip", "mllama")

# What a capability means to someone picking a model (badges and tooltips).
CAPABILITY_NAMES = {
    "completion": "Chat",
    "vision": "Vision",
    "thinking": "Thinking",
    "tools": "Tools",
    "embedding": "Embeddings",
    "insert": "Fill-in-the-middle",
}
CAPABILITY_TIPS = {
    "completion": "Answers messages",
    "vision": "Sees images: drop, paste or attach a picture and ask about it",
    "thinking": "Reasons before answering (the Think switch)",
    "tools": "Can call tools",
    "embedding": "Turns text into vectors",
    "insert": "Completes code between a prefix and a suffix",
}


def parse_parameters(text: str) -> dict[str, Any]:
    """Ollama's `parameters` text ("temperature 0.7\\nstop <eos>") → {name: value}."""
    out: dict[str, Any] = {}
    for line in (text or "").splitlines():
        name, _, value = line.strip().partition(" ")
        value = value.strip().strip('"')
        if not name or not value:
            continue
        try:
            parsed: Any = int(value)
        except ValueError:
            try:
                parsed = float(value)
            except ValueError:
                parsed = value
        if name == "stop":
            out.setdefault("stop", []).append(parsed)
        else:
            out[name] = parsed
    return out


def _memory_estimate(show: dict[str, Any]) -> int | None:
    """Hearth's extra in /api/show: the bytes the model needs once loaded, if the service says.

    Read from `hearth.memory` (`{"total": bytes, ...}` or bytes), tolerating a few spellings so
    the page keeps working while the service's field settles.
    """
    extra = show.get("hearth") or {}
    for key in ("memory", "memory_estimate", "estimated_memory"):
        value = extra.get(key) if isinstance(extra, dict) else None
        if value is None:
            value = show.get(key)
        if isinstance(value, dict):
            value = value.get("total") or value.get("total_bytes") or value.get("bytes")
        if isinstance(value, int | float) and value > 0:
            return int(value)
    return None


@dataclass
class ModelRow:
    """One installed model as the app lists it: /api/tags, then /api/show's details (the
    service's own record of a model file is hearth.server.store.modelinfo.ModelInfo)."""

    name: str
    size: int = 0
    modified_at: str = ""
    family: str = ""
    architecture: str = ""
    parameter_size: str = ""
    quantization: str = ""
    context_length: int = 0
    # what the service runs the model with when a request sets no num_ctx (/api/show's
    # hearth.num_ctx: the Modelfile's, else the service's default, capped); 0 when not said
    num_ctx: int = 0
    capabilities: list[str] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    memory_estimate: int | None = None
    memory_parts: dict[str, int] = field(default_factory=dict)
    problem: str = ""  # why the service cannot run this model, when it says so
    runs_on: str = ""  # loaded: where (/api/ps's hearth.layout: "CPU only", "18/19 layers on ...")
    engine: str = ""  # /api/show's hearth.engine and engine_reason: "llama.cpp (why)"
    details_loaded: bool = False

    @classmethod
    def from_tag(cls, tag: dict[str, Any]) -> ModelRow:
        details = tag.get("details") or {}
        # /api/show's list is the one that counts; until it arrives, what /api/tags says: a
        # list of its own (newer services), or a vision tower among the families ("clip",
        # Ollama's older vision models).
        caps = tag.get("capabilities")
        families = details.get("families") or []
        if isinstance(caps, list):
            capabilities = [str(c) for c in caps]
        elif isinstance(families, list) and any(f in _VISION_FAMILIES for f in families):
            capabilities = ["completion", "vision"]
        else:
            capabilities = []
        return cls(
            name=str(tag.get("name") or tag.get("model") or ""),
            size=int(tag.get("size") or 0),
            modified_at=str(tag.get("modified_at") or ""),
            family=str(details.get("family") or ""),
            architecture=str(details.get("family") or ""),
            parameter_size=str(details.get("parameter_size") or ""),
            quantization=str(details.get("quantization_level") or ""),
            capabilities=capabilities,
        )

    def add_show(self, show: dict[str, Any]) -> None:
        info = show.get("model_info") or {}
        details = show.get("details") or {}
        arch = str(info.get("general.architecture") or details.get("family") or self.family)
        self.architecture = arch
        self.context_length = int(info.get(f"{arch}.context_length") or 0)
        if not self.parameter_size:
            self.parameter_size = _human_count(info.get("general.parameter_count"))
        self.quantization = str(details.get("quantization_level") or self.quantization)
        self.capabilities = [str(c) for c in show.get("capabilities") or []]
        self.parameters = parse_parameters(str(show.get("parameters") or ""))
        self.memory_estimate = _memory_estimate(show)
        hearth = show.get("hearth")
        extra: dict[str, Any] = hearth if isinstance(hearth, dict) else {}
        memory = extra.get("memory")
        if isinstance(memory, dict):
            self.memory_parts = {
                k: int(v) for k, v in memory.items() if isinstance(v, int | float) and k != "total"
            }
        self.num_ctx = int(extra.get("num_ctx") or 0)
        if extra.get("supported") is False:
            self.problem = str(extra.get("problem") or "not supported")
        name = {"llamacpp": "llama.cpp", "hearth": "Hearth"}.get(str(extra.get("engine")), "")
        self.engine = f"{name} ({extra.get('engine_reason')})" if name else ""
        self.details_loaded = True

    @property
    def vision(self) -> bool:
        return "vision" in self.capabilities

    @property
    def thinking(self) -> bool:
        return "thinking" in self.capabilities

    @property
    def chat(self) -> bool:
        # Until /api/show answers, assume a model can chat; embedding-only ones cannot.
        return not self.details_loaded or "completion" in self.capabilities

    def modified(self) -> str:
        try:
            return dt.datetime.fromisoformat(self.modified_at).strftime("%d %b %Y")
        except ValueError:
            return ""


class ModelListModel(QAbstractTableModel):
    """One row per installed model; column 0 (the name) doubles as a combo-box model."""

    InfoRole = Qt.ItemDataRole.UserRole + 1
    COLUMNS = ("Name", "Size", "Params", "Quant", "Architecture", "Context", "Capabilities")

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._rows: list[ModelRow] = []

    def set_models(self, models: list[ModelRow]) -> None:
        self.beginResetModel()
        self._rows = sorted(models, key=lambda m: m.name)
        self.endResetModel()

    def models(self) -> list[ModelRow]:
        return list(self._rows)

    def info(self, name: str) -> ModelRow | None:
        row = self.row_of(name)
        return self._rows[row] if row >= 0 else None

    def row_of(self, name: str) -> int:
        # Ollama names default their tag to "latest": "llama" is "llama:latest".
        full = name if ":" in name else name + ":latest"
        return next((i for i, m in enumerate(self._rows) if m.name in (name, full)), -1)

    def refresh_row(self, name: str) -> None:
        row = self.row_of(name)
        if row >= 0:
            self.dataChanged.emit(self.index(row, 0), self.index(row, len(self.COLUMNS) - 1))

    def capabilities_text(self, capabilities: list[str]) -> str:
        """The Capabilities column: what sets a model apart ("Vision", "Thinking, Tools"), or
        "Chat" for a plain chat model; "…" until /api/show answers."""
        if not capabilities:
            return "…"
        extras = [c for c in capabilities if c != "completion"]
        return ", ".join(self.tr(CAPABILITY_NAMES.get(c, c)) for c in extras or capabilities)

    def rowCount(self, parent: _Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: _Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = 0) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return self.tr(self.COLUMNS[section])
        return None

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        m = self._rows[index.row()]
        if role == self.InfoRole:
            return m
        if role == Qt.ItemDataRole.ToolTipRole and index.column() in (0, 6) and m.capabilities:
            return "\n".join(
                f"{self.tr(CAPABILITY_NAMES.get(c, c))}: {self.tr(CAPABILITY_TIPS[c])}"
                if c in CAPABILITY_TIPS
                else c
                for c in m.capabilities
            )
        if role == Qt.ItemDataRole.TextAlignmentRole and index.column() in (1, 5):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role not in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.AccessibleTextRole):
            return None
        col = index.column()
        if col == 0:
            return m.name
        if col == 1:
            return human_bytes(m.size)
        if col == 2:
            return m.parameter_size or "—"
        if col == 3:
            return m.quantization or "—"
        if col == 4:
            return m.architecture or "—"
        if col == 5:
            return f"{m.context_length:,}" if m.context_length else "—"
        if col == 6:
            return self.capabilities_text(m.capabilities)
        return None
