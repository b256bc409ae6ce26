"""Tokenize / detokenize with llama.cpp (llama-cpp-python) in its own process, for comparisons.

Usage: python llamacpp_tokenize.py REQUEST.json OUT.json

REQUEST: {"model": "path.gguf",
          "items": [[text, add_bos, special], ...],            # llama_tokenize
          "detokenize": [[ids, remove_special, unparse_special], ...]}   # optional

OUT: the list of id lists, one per item. When "detokenize" is given, OUT is instead
{"tokens": [...], "detokenized": [{"c": hex, "py": hex}, ...]} where "c" is the bytes of
llama.cpp's `llama_detokenize(ids, remove_special, unparse_special)` and "py" those of
llama-cpp-python's `Llama.detokenize(ids, special=unparse_special)`, both as hex strings.

A REQUEST of the form {"batch": [request, ...]} answers each request in turn (one process
for several vocabularies); OUT is then the list of their answers.

Kept out of the test process on purpose: llama-cpp-python loads its own libggml, which must
not meet the engine's.
"""

from __future__ import annotations

import ctypes
import json
import sys


def main(request_path: str, out_path: str) -> None:
    with open(request_path, encoding="utf-8") as f:
        req = json.load(f)
    result = [answer(r) for r in req["batch"]] if "batch" in req else answer(req)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f)


def answer(req: dict) -> object:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=req["model"], vocab_only=True, verbose=False)
    tokens = [
        llm.tokenize(text.encode("utf-8"), add_bos=bool(add_bos), special=bool(special))
        for text, add_bos, special in req.get("items", [])
    ]
    if "detokenize" not in req:
        result: object = tokens
    else:
        vocab = llm._model.vocab
        detok = []
        for ids, remove_special, unparse_special in req["detokenize"]:
            arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
            size = 64 + 64 * len(ids)
            while True:
                buf = ctypes.create_string_buffer(size)
                n = llama_cpp.llama_detokenize(
                    vocab, arr, len(ids), buf, size, bool(remove_special), bool(unparse_special)
                )
                if n >= 0:
                    break
                size = -n + 16
            c_bytes = buf.raw[:n]
            try:
                py_bytes = llm.detokenize(ids, special=bool(unparse_special)).hex()
            except Exception as exc:  # pieces over 32 bytes trip an assert in llama-cpp-python
                py_bytes = f"error: {exc!r}"
            detok.append({"c": c_bytes.hex(), "py": py_bytes})
        result = {"tokens": tokens, "detokenized": detok}
    llm.close()
    return result


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: llamacpp_tokenize.py REQUEST.json OUT.json")
    main(sys.argv[1], sys.argv[2])
