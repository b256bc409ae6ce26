"""The GPU check: Hearth on a real GPU, measured against itself on the CPU and against llama.cpp
CUDA, through the service a user runs (`hearth serve`, Ollama's API). bench/gpu/check.sh sets
up the machine and runs this; `--dry-run` runs every step that needs no GPU (the CI test).

    python bench/gpu/check.py --model MODEL.gguf | --shape NAME --out DIR [--vision DIR]
                              [--dry-run]

Writes DIR/report.json (rewritten after every step, so a run cut short keeps what it measured)
and logs to stdout. Steps, each independent of the others' failures:

1. devices: the service's device report (`hearth devices --json`: ggml's devices matched with
   NVML) and nvidia-smi's view.
2. parity: the model's greedy continuation of fixed prompts on the CPU (`num_gpu` 0), fully
   offloaded and with half the layers offloaded: the same tokens, and the chosen tokens'
   logprobs within TOLERANCE of the CPU's (GPU kernels are not bit-identical to the CPU's: the
   spread is measured and reported). Where two runs part, the CPU's top-2 margin there says
   whether it was a near-tie. Also the batch-invariance report each runner gave.
3. speed: prompt (about 480 tokens in one batch) and generation tok/s, Hearth on the CPU, full
   and partial offload, from the runner's own timers in the final record, medians over rounds
   with fresh prompts (nothing cached); llama.cpp CUDA on the same file and prompt where its
   CUDA build is installed (bench/workers.py, its compute-only timers), and the ratios.
4. memory: the service's estimate before loading (/api/show's layout) vs what the runner
   measured (/api/ps) vs the GPU memory nvidia-smi shows in use, for full and partial offload.
5. refusal: a model whose KV cache at the asked num_ctx exceeds GPU and RAM together is refused
   at load with a sentence giving the numbers (HTTP 507), and the service still serves.
6. vision: a tiny random Gemma 3 with its projector (built by bench/gpu/stage.sh with
   transformers and llama.cpp's converter, carried) answers about an image on the GPU and on
   the CPU; the answers and where the projector ran are reported.
7. correctness: teacher-forced logprobs of the same tokens, Hearth on the GPU against
   llama.cpp CUDA, beside llama.cpp's own CPU-vs-CUDA spread (bench/gpu/teacher.py).
8. overhead: the tiny model's time per generated token against llama.cpp's
   (bench/token_overhead.py).
9. shapes: the speed step at real models' shapes (`--shapes`, bench/shapes.py's files), all
   layers and about half on the GPU, against llama.cpp CUDA.
10. abort: a runner killed with SIGABRT mid-stream; the request gets a sentence, the service
   keeps serving.
(7-10: bench/gpu/steps.py.) The memory step also measures the backend context a runner holds
on the GPU (nvidia-smi's process memory less the runner's buffers) and prints it as
HEARTH_GPU_CONTEXT. Speed keeps every round's figures beside the medians. At the end the
targets (bench/gpu/targets.py) are evaluated: the report's "targets" lists those met and
missed, and on a GPU the check exits 1 naming each one missed.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

TOLERANCE = 0.05  # |logprob(GPU) - logprob(CPU)| of a chosen token, nats
PARITY_PROMPTS = [
    "The capital of France is",
    "Here is a short poem about the sea:\n",
    "def fibonacci(n):\n",
]
from prompts import LONG_PROMPT as SPEED_PROMPT  # noqa: E402  (bench/prompts.py)
from prompts import llamacpp_tokens  # noqa: E402
from shapes import SHAPES, model_from_args  # noqa: E402

sys.path.insert(0, str(REPO / "bench" / "gpu"))
import steps as more_steps  # noqa: E402  (bench/gpu/steps.py)
import targets  # noqa: E402  (bench/gpu/targets.py)


class Check:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.report: dict[str, Any] = {
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "dry_run": args.dry_run,
            "model": Path(args.model).name,
            "tolerance_logprob": TOLERANCE,
            "errors": {},
        }
        self.home = Path(tempfile.mkdtemp(prefix="hearth-gpu-"))
        self.proc: subprocess.Popen[str] | None = None
        self.gpu: dict[str, Any] | None = None  # the first GPU of the device report
        self.layers = 0  # the model's layers, the output layer counted (as num_gpu counts)
        self.url = ""
        self.client = httpx.Client(timeout=600)

    # -- the service ---------------------------------------------------------------------------

    def start_service(self) -> None:
        # HEARTH_RUNNER_LOG: the runners' stderr in service.log (a native error's whole text)
        env = dict(os.environ, HEARTH_HOME=str(self.home), HEARTH_OFFLINE="1",
                   HEARTH_KEEP_ALIVE="10m", HEARTH_NUM_PARALLEL="1",
                   HEARTH_RUNNER_LOG="1")  # fmt: skip
        log = open(self.out / "service.log", "w")  # noqa: SIM115 - lives as long as the service
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hearth", "serve", "--port", "0"],
            stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=self.home,
        )  # fmt: skip
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 120
        for line in self.proc.stdout:
            if line.startswith("Hearth listening on "):
                self.url = line.rsplit(" ", 1)[-1].strip()
                break
            if time.monotonic() > deadline:
                break
        if not self.url:
            raise RuntimeError("hearth serve did not start: see service.log")
        say(f"service at {self.url}")

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"the service has exited (status {self.proc.returncode})")
        r = self.client.request(method, self.url + path, json=body)
        if r.status_code >= 400:
            raise ServiceError(r.status_code, r.text)
        return r.json() if r.content else None

    def create(self, name: str, path: Path) -> None:
        self.api("POST", "/api/create", {"model": name, "from": str(path.resolve()), "link": True,
                                         "stream": False})  # fmt: skip

    def unload_all(self) -> None:
        for m in self.api("GET", "/api/ps")["models"]:
            self.api("POST", "/api/generate", {"model": m["name"], "keep_alive": 0})

    def generate(self, model: str, prompt: str, options: dict[str, Any], **extra: Any) -> Any:
        body = {"model": model, "prompt": prompt, "raw": True, "stream": False,
                "options": {"temperature": 0, "seed": 0, **options}, **extra}  # fmt: skip
        return self.api("POST", "/api/generate", body)

    def loaded(self, model: str) -> dict[str, Any]:
        for m in self.api("GET", "/api/ps")["models"]:
            if m["name"].startswith(model):
                return m
        raise RuntimeError(f"{model} is not loaded")

    def save(self) -> None:
        self.report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        (self.out / "report.json").write_text(json.dumps(self.report, indent=1) + "\n")

    def step(self, name: str, fn: Any) -> None:
        start = time.monotonic()
        say(f"--- {name}")
        try:
            self.report[name] = fn()
        except Exception as e:
            self.report["errors"][name] = f"{type(e).__name__}: {e}"
            say(traceback.format_exc())
        self.report.setdefault("seconds", {})[name] = round(time.monotonic() - start, 1)
        self.save()

    def close(self) -> None:
        if self.proc is not None:
            self.report["service_exit"] = self.proc.poll()  # None: still serving at the end
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.home, ignore_errors=True)

    # -- the steps -----------------------------------------------------------------------------

    def devices(self) -> dict[str, Any]:
        report = self.api("GET", "/api/hearth/devices")
        gpus = [d for d in report["devices"] if d["kind"] in ("GPU", "IGPU")]
        self.gpu = gpus[0] if gpus else None
        self.report["card"] = (
            (self.gpu.get("nvidia") or {}).get("name") or self.gpu["description"]
            if self.gpu
            else None
        )
        return {"hearth": report, "nvidia_smi": nvidia_smi_gpus()}

    def configs(self, layers: int = 0) -> dict[str, dict[str, Any]]:
        """name -> options: the CPU, full offload and half the layers (with a GPU)."""
        layers = layers or self.layers
        configs: dict[str, dict[str, Any]] = {"cpu": {"num_gpu": 0}}
        if self.gpu is not None:
            configs["full"] = {"num_gpu": layers}
            configs["half"] = {"num_gpu": layers // 2}
        return configs

    def prepare(self) -> None:
        """The model under test, as `check` in the service's store; its layer count."""
        self.create("check", Path(self.args.model))
        self.layers = self.layer_count("check")

    def layer_count(self, model: str) -> int:
        """The model's layers as num_gpu counts them (blocks + the output layer)."""
        show = self.api("POST", "/api/show", {"model": model})
        info = show.get("model_info") or {}
        arch = info.get("general.architecture", "")
        return int(info.get(f"{arch}.block_count", 0)) + 1

    def parity(self) -> dict[str, Any]:
        n = 8 if self.args.dry_run else 48
        runs: dict[str, Any] = {}
        for name, options in self.configs().items():
            self.unload_all()
            outputs = []
            for prompt in PARITY_PROMPTS:
                r = self.generate("check", prompt, {**options, "num_predict": n},
                                  logprobs=True, top_logprobs=2)  # fmt: skip
                outputs.append(
                    {
                        "text": r["response"],
                        "tokens": [p["token"] for p in r.get("logprobs") or []],
                        "logprobs": [p["logprob"] for p in r.get("logprobs") or []],
                        "top2": [
                            [t["logprob"] for t in p.get("top_logprobs") or []][:2]
                            for p in r.get("logprobs") or []
                        ],
                    }
                )
            m = self.loaded("check")
            runs[name] = {
                "options": options,
                "layout": m["hearth"].get("layout"),
                "batch_invariance": m["hearth"].get("batch_invariance"),
                "outputs": outputs,
            }
        self.unload_all()
        return {"runs": runs, "compare": compare_runs(runs)}

    def speed(self) -> dict[str, Any]:
        return self.speed_of("check", Path(self.args.model), self.configs(), self.layers)

    def speed_of(
        self, model: str, path: Path, configs: dict[str, dict[str, Any]], layers: int
    ) -> dict[str, Any]:
        """Hearth's prompt and generation speed in each config, every round kept ("rounds")
        beside the medians, and llama.cpp's on the same file."""
        rounds, n = (1, 8) if self.args.dry_run else (self.args.rounds, 128)
        out: dict[str, Any] = {"rounds": rounds, "generate": n}
        for name, options in configs.items():
            self.unload_all()
            rows = []
            for r in range(rounds + 1):  # the first round warms up (CUDA kernels, graphs)
                # num_predict with no stop: a model may still end early, rates stay per token
                res = self.generate(model, SPEED_PROMPT.format(r=r), {**options, "num_predict": n})
                rows.append(rates(res))
            out[name] = {**median_rates(rows[1:]), "warmup": rows[0], "rounds": rows[1:]}
            say(f"{model} {name}: {median_rates(rows[1:])}")
        self.unload_all()
        out["llamacpp"] = self.llamacpp_speed(rounds, n, path, layers, set(configs))
        out["ratios"] = speed_ratios(out)
        return out

    def llamacpp_speed(
        self, rounds: int, n: int, path: Path, layers: int, configs: set[str]
    ) -> dict[str, Any]:
        """llama.cpp on the same file and prompt, in its own process (bench/workers.py)."""
        code = "import llama_cpp, sys; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 3)"
        probe = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if probe.returncode not in (0, 3):
            return {"skipped": f"llama-cpp-python does not import: {probe.stderr.strip()[-300:]}"}
        gpu_build = probe.returncode == 0
        ids = llamacpp_tokens(str(path), SPEED_PROMPT.format(r=0))
        # the threads Hearth's runner takes by default (physical performance cores), both sides
        from hearth.engine.cpu import compute_threads

        threads = compute_threads()
        result: dict[str, Any] = {"cuda_build": gpu_build, "prompt_tokens": len(ids),
                                  "threads": threads}  # fmt: skip
        offload = {"cpu": 0}
        if gpu_build and self.gpu is not None:
            offload.update(full=layers, half=layers // 2)
        for name, gpu_layers in offload.items():
            if name not in configs:
                continue
            # one batch for the whole prompt (as Hearth's runner evaluates it), whatever the
            # tokenizer makes of it (the synthetic model's small vocabulary: more tokens)
            batch = max(512, len(ids))
            req = {"model": str(path), "ids": ids, "n_ctx": max(2048, batch + n + 64),
                   "n_batch": batch,
                   "threads": threads, "generate": n, "reps": rounds,
                   "gpu_layers": gpu_layers}  # fmt: skip
            runs = run_worker("llamacpp", req)["runs"]
            result[name] = {
                "prompt_tok_s": statistics.median(len(ids) / r["internal_prompt_s"] for r in runs),
                "gen_tok_s": statistics.median(n / r["internal_gen_s"] for r in runs),
                "gen_tok_s_wall": statistics.median(n / r["gen_s"] for r in runs),
                "rounds": runs,  # every round's timings, seconds
            }
            say(f"llama.cpp {name}: {result[name]}")
        return result

    def memory(self) -> dict[str, Any]:
        """Per GPU config: a model carrying the config as Modelfile parameters, so /api/show
        plans the layout a load of it would get (the estimate), then loaded."""
        if self.gpu is None:
            return {"skipped": "no GPU"}
        out: dict[str, Any] = {}
        gpu_id = self.gpu["id"]
        for name, options in self.configs().items():
            if name == "cpu":
                continue
            self.unload_all()
            model = f"check-{name}"
            body = {"model": model, "from": "check", "parameters": options, "stream": False}
            self.api("POST", "/api/create", body)
            show = self.api("POST", "/api/show", {"model": model})
            before = nvidia_smi_used()
            self.generate(model, "Hello", {"num_predict": 1})
            m = self.loaded(model)
            after = nvidia_smi_used()
            hearth = show.get("hearth") or {}
            estimate = {d["device"]: d for d in hearth.get("devices") or []}
            measured = {d["device"]: d for d in m["hearth"].get("devices") or []}
            out[name] = {
                "layout": m["hearth"].get("layout"),
                "size": m["size"],
                "size_vram": m["size_vram"],
                "estimated_memory": hearth.get("estimated_memory"),
                "estimate_before_load": estimate.get(gpu_id),
                "runner_measured": measured.get(gpu_id),
                "runner_memory": m["hearth"].get("memory"),
                "nvidia_smi_used_delta": None
                if before is None or after is None
                else after - before,
                "nvidia_smi_process": nvidia_smi_process(m["hearth"].get("pid")),
            }
            say(f"{name}: {out[name]}")
        self.unload_all()
        self.report["gpu_context"] = backend_context(out, self.gpu)
        say(f"measured: HEARTH_GPU_CONTEXT={self.report['gpu_context']['measured']}")
        return out

    def refusal(self) -> dict[str, Any]:
        path = self.home / "huge-context.gguf"
        num_ctx = write_huge_context_model(path)
        self.create("huge", path)
        try:
            self.generate("huge", "Hello", {"num_ctx": num_ctx, "num_predict": 1})
        except ServiceError as e:
            refused = {"status": e.status, "message": e.text}
        else:
            refused = {"status": 200, "message": "loaded: it was not refused"}
        # the service still serves another model afterwards
        after = self.generate("check", "The capital of France is", {"num_predict": 4})
        return {"num_ctx": num_ctx, "refused": refused, "then_served": after["response"]}

    def vision(self) -> dict[str, Any]:
        folder = Path(self.args.vision) if self.args.vision else None
        if folder is None or not (folder / "ollama.gguf").is_file():
            return {"skipped": "no tiny vision model carried (bench/gpu/stage.sh builds it)"}
        self.create("tiny-vision", folder / "ollama.gguf")
        image = base64.b64encode((folder / "image.png").read_bytes()).decode()
        answers = {}
        for name, options in self.configs().items():
            self.unload_all()
            body = {"model": "tiny-vision", "stream": False,
                    "messages": [{"role": "user", "content": "What is in the picture?",
                                  "images": [image]}],
                    "options": {"temperature": 0, "num_predict": 16, **options}}  # fmt: skip
            r = self.api("POST", "/api/chat", body)
            m = self.loaded("tiny-vision")
            answers[name] = {
                "answer": r["message"]["content"],
                "layout": m["hearth"].get("layout"),
                "projector": m["hearth"].get("projector"),
                "devices": m["hearth"].get("devices"),
                "runner_memory": m["hearth"].get("memory"),
            }
        self.unload_all()
        texts = {a["answer"] for a in answers.values()}
        on_gpu = [n for n, a in answers.items() if a["projector"] not in (None, "CPU")]
        return {"answers": answers, "same_answer": len(texts) == 1, "projector_on_gpu": on_gpu}

    def correctness(self) -> dict[str, Any]:
        return more_steps.correctness(self)

    def overhead(self) -> dict[str, Any]:
        return more_steps.overhead(self)

    def shapes(self) -> dict[str, Any]:
        return more_steps.shapes_speed(self)

    def abort(self) -> dict[str, Any]:
        return more_steps.abort(self)


class ServiceError(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text[:500]}")
        self.status, self.text = status, text


def say(text: str) -> None:
    print(text, flush=True)


def compare_runs(runs: dict[str, Any]) -> dict[str, Any]:
    """Each GPU run against the CPU's: same tokens?, the largest logprob difference over the
    common prefix, and, where they part, the CPU's top-2 margin at that position."""
    base = runs.get("cpu")
    out: dict[str, Any] = {}
    for name, run in runs.items():
        if name == "cpu" or base is None:
            continue
        prompts = []
        for a, b in zip(base["outputs"], run["outputs"], strict=True):
            common = 0
            while (
                common < min(len(a["tokens"]), len(b["tokens"]))
                and a["tokens"][common] == b["tokens"][common]
            ):
                common += 1
            diffs = [
                abs(x - y)
                for x, y in zip(a["logprobs"][:common], b["logprobs"][:common], strict=True)
            ]
            same = a["tokens"] == b["tokens"]
            margin = None
            if not same and common < len(a["top2"]) and len(a["top2"][common]) == 2:
                margin = a["top2"][common][0] - a["top2"][common][1]
            prompts.append(
                {
                    "same_text": a["text"] == b["text"],
                    "same_tokens": same,
                    "tokens": len(a["tokens"]),
                    "common_prefix": common,
                    "max_logprob_diff": max(diffs, default=0.0),
                    "mean_logprob_diff": statistics.fmean(diffs) if diffs else 0.0,
                    "cpu_top2_margin_where_parted": margin,
                }
            )
        worst = max((p["max_logprob_diff"] for p in prompts), default=0.0)
        out[name] = {
            "prompts": prompts,
            "all_same_text": all(p["same_text"] for p in prompts),
            "max_logprob_diff": worst,
            "within_tolerance": worst <= TOLERANCE,
        }
    return out


def backend_context(memory: dict[str, Any], gpu: dict[str, Any] | None) -> dict[str, Any]:
    """What a runner's process holds on the GPU beyond the buffers it reports (CUDA context,
    cuBLAS workspace, pools): nvidia-smi's memory of the process less the runner's bytes on
    the GPU, the largest over the configs; beside the constant the layout plan counts."""
    from hearth.server.scheduling.layout import BACKEND_CONTEXT, DeviceId, Gpu

    library = (gpu or {}).get("library") or "CUDA"
    planned = Gpu(DeviceId(library, "0"), 0).minimum_memory
    seen = []
    for row in memory.values():
        process, own = row.get("nvidia_smi_process"), row.get("runner_measured") or {}
        if process is not None and own:
            seen.append(process - sum(own.get(k, 0) for k in ("weights", "cache", "graph")))
    return {"measured": max(seen) if seen else None, "each": seen, "planned": planned,
            "library": library, "constants": BACKEND_CONTEXT}  # fmt: skip


def rates(res: dict[str, Any]) -> dict[str, float]:
    return {
        "prompt_tokens": res["prompt_eval_count"],
        "prompt_tok_s": res["prompt_eval_count"] / max(res["prompt_eval_duration"], 1) * 1e9,
        "gen_tokens": res["eval_count"],
        "gen_tok_s": res["eval_count"] / max(res["eval_duration"], 1) * 1e9,
    }


def median_rates(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def speed_ratios(out: dict[str, Any]) -> dict[str, float]:
    ratios: dict[str, float] = {}
    cpu = out.get("cpu")
    lc = out.get("llamacpp") or {}
    for name in ("full", "half"):
        if name in out and cpu:
            for k in ("prompt_tok_s", "gen_tok_s"):
                ratios[f"{name}_over_cpu_{k}"] = out[name][k] / cpu[k]
    for name in ("cpu", "full", "half"):
        if name in out and name in lc:
            for k in ("prompt_tok_s", "gen_tok_s"):
                ratios[f"{name}_over_llamacpp_{k}"] = out[name][k] / lc[name][k]
    return ratios


def run_worker(worker: str, req: dict[str, Any]) -> Any:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(req, f)
    try:
        out = subprocess.run(
            [sys.executable, str(REPO / "bench" / "workers.py"), worker, f.name],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    finally:
        Path(f.name).unlink()
    if out.returncode:
        raise RuntimeError(f"{worker} worker failed: {out.stderr[-1500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def write_huge_context_model(path: Path) -> int:
    """A small file whose KV cache at its full context is far larger than any machine: many
    wide KV heads on few weights (head_dim is independent of the embedding width). Returns the
    num_ctx to ask for: 1M tokens x 16 layers x 2 x 8192 x 2 bytes = 512 GiB of F16 KV, more
    than an H200 (141 GB) and its machine's RAM (128 GiB) together."""
    from hearth.plugins.testing.tiny import TinyTransformer, write_tiny_model

    num_ctx = 1 << 20
    spec = TinyTransformer(embd=64, layers=16, heads=64, kv_heads=64, head_dim=128, ff=128,
                           context=num_ctx)  # fmt: skip
    write_tiny_model(path, spec)
    return num_ctx


def nvidia_smi(args: list[str]) -> list[list[str]] | None:
    if shutil.which("nvidia-smi") is None:
        return None
    r = subprocess.run(["nvidia-smi", *args, "--format=csv,noheader,nounits"],
                       capture_output=True, text=True)  # fmt: skip
    if r.returncode:
        return None
    return [[c.strip() for c in line.split(",")] for line in r.stdout.strip().splitlines()]


def nvidia_smi_gpus() -> Any:
    rows = nvidia_smi(["--query-gpu=name,driver_version,memory.total,memory.used,compute_cap"])
    if rows is None:
        return None
    keys = ["name", "driver", "total_mib", "used_mib", "compute_cap"]
    return [dict(zip(keys, r, strict=False)) for r in rows]


def nvidia_smi_used() -> int | None:
    rows = nvidia_smi(["--query-gpu=memory.used"])
    return int(rows[0][0]) << 20 if rows else None


def nvidia_smi_process(pid: int | None) -> int | None:
    """Bytes nvidia-smi shows for the runner's process (None when it lists no processes, as in
    some containers)."""
    rows = nvidia_smi(["--query-compute-apps=pid,used_memory"]) or []
    for r in rows:
        if pid is not None and r[0] == str(pid):
            return int(r[1]) << 20
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--model")
    which.add_argument("--shape", choices=sorted(SHAPES), help="a bench/shapes.py shape")
    p.add_argument("--out", required=True)
    p.add_argument("--vision", help="folder with the tiny vision model (ollama.gguf, image.png)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dry-run", action="store_true", help="small counts, for the CPU machine")
    p.add_argument(
        "--steps",
        default="devices,parity,speed,memory,refusal,vision,correctness,overhead,shapes,abort",
    )
    p.add_argument(
        "--shapes",
        default=None,
        help="bench/shapes.py shapes for the shapes step, comma-separated (default on a GPU: "
        f"{more_steps.DEFAULT_SHAPES}; none in a dry run)",
    )
    args = p.parse_args()
    if args.shapes is None:
        args.shapes = "" if args.dry_run else more_steps.DEFAULT_SHAPES
    if args.shape:  # written (and quantized by llama.cpp) here, once per machine
        args.model = model_from_args(args)
    check = Check(args)
    try:
        check.start_service()
        check.prepare()
        for name in args.steps.split(","):
            check.step(name, getattr(check, name))
    finally:
        check.close()
        check.save()
    errors = check.report["errors"]
    verdict = check.report["targets"] = targets.evaluate(check.report)
    check.save()
    say(f"report: {check.out / 'report.json'}; steps failed: {sorted(errors) or 'none'}")
    for line in verdict["met"]:
        say(f"target met: {line}")
    for line in verdict["missed"]:
        say(f"target {'MISSED' if verdict['enforced'] else 'not enforced (no GPU)'}: {line}")
    sys.exit(1 if errors or (verdict["enforced"] and verdict["missed"]) else 0)


if __name__ == "__main__":
    main()
