"""`hearth pull`: models from Hugging Face (`hf.co/OWNER/REPO[:QUANT]`) and from Ollama
registries (`NAME[:TAG]`, `HOST/NAMESPACE/MODEL:TAG`), downloaded in parallel parts,
resumable, verified by sha256 before the model is registered.

Modules: `puller` (one pull from start to end), `hf` and `registry` (what to download from
each kind of source), `download` (one blob: parts, resume, digest, locks), `network` (the
offline switch and the HTTP client), `progress` (Ollama's NDJSON lines), `errors`.
"""

from .errors import DiskFull, Offline, PullCancelled, PullError
from .network import offline
from .puller import Pull, prepare

__all__ = ["DiskFull", "Offline", "Pull", "PullCancelled", "PullError", "offline", "prepare"]
