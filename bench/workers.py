"""Timing workers, each run in its own process: `python workers.py ours|llamacpp REQUEST.json`.

Both sides get the same token ids, the same thread count and the same context size, and time
the same work with the same clock: one prompt pass of `prompt` tokens, then `generate` greedy
single-token passes. llama.cpp also reports its internal (compute-only) timers.
Prints one JSON object to stdout.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np


def _gpu_layout(req: dict) -> dict | None:
    """With `"gpu": true`, every layer of the model (its blocks and the output layer) on the
    first CUDA device, as the runner's `--layout` says it; else None (the CPU)."""
    if not req.get("gpu"):
        return None
    from gguf import GGUFReader

    reader = GGUFReader(req["model"])
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    blocks = int(reader.fields[f"{arch}.block_count"].parts[-1][0])
    return {"gpus": [{"device": "CUDA0", "layers": list(range(blocks + 1))}], "projector": None}


def _ours(req: dict) -> dict:
    sys.path.insert(0, req["repo"])
    from hearth.engine.forward import ForwardEngine
    from hearth.engine.input import PassInput
    from hearth.engine.ml.placement import DevicePlacement
    from hearth.plugins.registry import load_installed_model as load_model

    placement = DevicePlacement.from_json(_gpu_layout(req))
    loaded = load_model(req["model"], num_threads=req["threads"], placement=placement)
    engine = ForwardEngine(loaded, num_ctx=req["n_ctx"], num_batch=req["n_batch"])
    ids = np.array(req["ids"], dtype=np.int32)
    results = []
    for _ in range(req["reps"] + 1):  # the first round warms up
        engine.cache.remove(0, 0)
        n = len(ids)
        t0 = time.perf_counter()
        logits = engine.forward(PassInput(ids, np.arange(n), np.zeros(n), np.array([n - 1])))
        t1, c1 = time.perf_counter(), time.process_time()
        tok, pos = int(logits[0].argmax()), n
        for _ in range(req["generate"]):
            logits = engine.forward(
                PassInput(np.array([tok]), np.array([pos]), np.array([0]), np.array([0]))
            )
            tok, pos = int(logits[0].argmax()), pos + 1
        t2, c2 = time.perf_counter(), time.process_time()
        results.append({"prompt_s": t1 - t0, "gen_s": t2 - t1, "gen_cpu_s": c2 - c1})
    engine.close()
    loaded.close()
    return {"runs": results[1:]}


def _runner(req: dict) -> dict:
    """The whole runner path: batching loop, sampling, streaming events (in-process)."""
    sys.path.insert(0, req["repo"])
    from hearth.runner.core import Runner, RunnerConfig
    from hearth.runner.protocol import CompletionDone, CompletionOptions, CompletionRequest

    layout = _gpu_layout(req)
    runner = Runner(
        RunnerConfig(req["model"], num_ctx=req["n_ctx"], num_batch=req["n_batch"],
                     threads=req["threads"], layout=json.dumps(layout) if layout else None,
                     pipelined=req.get("pipelined"))
    )  # fmt: skip
    results = []
    options = CompletionOptions(
        temperature=0,
        repeat_penalty=1.0,
        num_predict=req["generate"],
        speculate=req.get("speculate"),  # None: the runner's default
    )
    for i in range(req["reps"] + 1):  # the first round warms up
        # A different first token each round so nothing comes from the prompt cache.
        ids = [req["ids"][0], req.get("vary_base", 1000) + i, *req["ids"][2:]]
        c0 = time.process_time()
        seq = runner.completion(CompletionRequest(tokens=ids, options=options))
        done = None
        while (event := seq.events.get()) is not None:
            done = event if isinstance(event, CompletionDone) else done
        cpu = time.process_time() - c0  # the whole request (a short prompt: mostly tokens)
        assert done is not None and done.prompt_cached <= 1
        results.append(
            {
                "prompt_s": done.prompt_eval_duration / 1e9,
                "gen_s": done.eval_duration / 1e9,
                "gen_n": done.eval_count,
                "gen_cpu_s": cpu,
            }
        )
    runner.close()
    return {"runs": results[1:]}


def _llama(req: dict):  # type: ignore[no-untyped-def]
    """llama-cpp-python's `Llama` on the request's model, threads and sizes."""
    from llama_cpp import Llama

    return Llama(
        req["model"],
        # a CUDA build of llama.cpp (bench/gpu); "gpu": every layer
        n_gpu_layers=-1 if req.get("gpu") else req.get("gpu_layers", 0),
        flash_attn=False,  # as Hearth's runner by default: the same attention kernels
        n_ctx=req["n_ctx"],
        n_batch=req["n_batch"],
        n_ubatch=req["n_batch"],
        n_threads=req["threads"],
        n_threads_batch=req["threads"],
        verbose=False,
    )


def _llamacpp(req: dict) -> dict:
    import llama_cpp

    llm = _llama(req)
    n_vocab = llm.n_vocab()

    def decode(tokens: list[int], n_past: int) -> np.ndarray:
        # The binding's own eval() copies logits into a fixed-size array; go one level down.
        llm._batch.set_batch(batch=tokens, n_past=n_past, logits_all=False)
        llm._ctx.decode(llm._batch)
        ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(n_vocab,))

    ids = [int(t) for t in req["ids"]]
    results = []
    for _ in range(req["reps"] + 1):  # the first round warms up
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
        llama_cpp.llama_perf_context_reset(llm.ctx)
        t0 = time.perf_counter()
        tok, pos = int(decode(ids, 0).argmax()), len(ids)
        t1, c1 = time.perf_counter(), time.process_time()
        for _ in range(req["generate"]):
            tok, pos = int(decode([tok], pos).argmax()), pos + 1
        t2, c2 = time.perf_counter(), time.process_time()
        perf = llama_cpp.llama_perf_context(llm.ctx)
        results.append(
            {
                "prompt_s": t1 - t0,
                "gen_s": t2 - t1,
                "gen_cpu_s": c2 - c1,
                "internal_prompt_s": perf.t_p_eval_ms / 1000,
                "internal_gen_s": perf.t_eval_ms / 1000,
            }
        )
    return {"runs": results[1:]}


def _llamacpp_generate(req: dict) -> dict:
    """llama-cpp-python's own generation loop (`Llama.generate`: its sampler chain in C,
    greedy) with each token's text decoded as a streaming client would: the counterpart of
    Hearth's runner path, where `_llamacpp` is the counterpart of its engine loop."""
    import llama_cpp

    llm = _llama(req)
    ids = [int(t) for t in req["ids"]]
    results = []
    for _ in range(req["reps"] + 1):  # the first round warms up
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
        n, text = 0, []
        stream = llm.generate(ids, temp=0.0, top_k=1, repeat_penalty=1.0, reset=True)
        for tok in stream:  # the first token comes after the prompt: timing starts there
            if n == 0:
                t1, c1 = time.perf_counter(), time.process_time()
            text.append(llm.detokenize([tok], prev_tokens=None))
            n += 1
            if n > req["generate"]:
                break
        t2, c2 = time.perf_counter(), time.process_time()
        results.append({"gen_s": t2 - t1, "gen_cpu_s": c2 - c1, "gen_n": n - 1})
    return {"runs": results[1:]}


def _llamacpp_parallel(req: dict) -> dict:
    """Greedy decoding of 1 and of `streams` sequences together in llama.cpp (its defaults)."""
    import llama_cpp
    from llama_cpp import Llama

    default_context = llama_cpp.llama_cpp.llama_context_default_params

    def context_params():  # type: ignore[no-untyped-def]
        params = default_context()
        params.n_seq_max = req["streams"]  # the binding only sets this for embeddings
        params.kv_unified = True
        return params

    llama_cpp.llama_cpp.llama_context_default_params = context_params
    llm = Llama(
        req["model"],
        n_ctx=req["n_ctx"],
        n_batch=512,
        n_threads=req["threads"],
        n_threads_batch=req["threads"],
        verbose=False,
    )
    ctx, n_vocab = llm.ctx, llm.n_vocab()
    batch = llama_cpp.llama_batch_init(512, 0, req["streams"])

    def put(i: int, token: int, pos: int, seq: int, logits: bool) -> None:
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
        batch.seq_id[i][0], batch.logits[i] = seq, logits

    def rate(n_seq: int) -> float:
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
        prompts = req["prompts"][:n_seq]
        batch.n_tokens = sum(len(p) for p in prompts)
        i = 0
        for s, prompt in enumerate(prompts):
            for pos, token in enumerate(prompt):
                put(i, token, pos, s, pos == len(prompt) - 1)
                i += 1
        start = time.perf_counter()
        llama_cpp.llama_decode(ctx, batch)
        rows = np.cumsum([len(p) for p in prompts]) - 1
        tokens = [
            int(
                np.ctypeslib.as_array(
                    llama_cpp.llama_get_logits_ith(ctx, int(r)), shape=(n_vocab,)
                ).argmax()
            )
            for r in rows
        ]
        positions = [len(p) for p in prompts]
        for _ in range(req["generate"] - 1):
            batch.n_tokens = n_seq
            for s in range(n_seq):
                put(s, tokens[s], positions[s], s, True)
                positions[s] += 1
            llama_cpp.llama_decode(ctx, batch)
            for s in range(n_seq):
                logits = np.ctypeslib.as_array(
                    llama_cpp.llama_get_logits_ith(ctx, s), shape=(n_vocab,)
                )
                tokens[s] = int(logits.argmax())
        return n_seq * req["generate"] / (time.perf_counter() - start)

    rate(1)  # warm up
    runs = [{"one": rate(1), "many": rate(req["streams"])} for _ in range(req["reps"])]
    llama_cpp.llama_batch_free(batch)
    return {"runs": runs}


if __name__ == "__main__":
    with open(sys.argv[2]) as f:
        request = json.load(f)
    workers = {
        "ours": _ours,
        "runner": _runner,
        "llamacpp": _llamacpp,
        "llamacpp_generate": _llamacpp_generate,
        "llamacpp_parallel": _llamacpp_parallel,
    }
    fn = workers[sys.argv[1]]
    print(json.dumps(fn(request)))
