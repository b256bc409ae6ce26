"""Documents: the time to read and index a long PDF, the retrieval latency, and peak memory.

    .venv/bin/python bench/documents.py [--pages 300] [--rounds 3] [--questions 20] [--json OUT]
    .venv/bin/python bench/documents.py --scanned [--host URL --vision-model NAME] [--rounds 3]

It writes a PDF of `--pages` pages of text (tests/documents/make_documents.py: about 2,800
characters a page, one fact stated once on a page three quarters in), then per round, in a
fresh process each (so peak memory is the round's own): reads it (pypdf, page by page) and
splits it into chunks (`prepare_document`), stores it in a new history database (chunks and
their FTS5 index, `DocumentIndex.add`), and answers `--questions` questions
(`build_context` at num_ctx 4096: BM25 ranking, passage choice, stored sources, the prompt
rendered from the database) and as many bare rankings (`DocumentIndex.search`). No embedding
model is involved (full-text search, which every user has). Figures are medians over rounds;
latency is the median and the 95th percentile over each round's questions. Peak RSS is the
child's ru_maxrss, with its RSS after the imports beside it.

`--scanned` measures the one-time cost of a scanned page instead: a PDF of a text page and a
page that is only a picture of printed text, read through a vision model (`--vision-model` on
the service at `--host`; by default a `hearth serve` started here with the tiny random Gemma 3
and its projector, hearth_gemma3.testing, whose figures are the path's cost, not a real
model's). Per round: the page rendered (PDFium), transcribed (/api/chat, the model already
loaded; the first round's load is reported apart), the whole `prepare_document`, then the
chat stored and reopened from the history database with the file deleted, counting the
renders and service calls the reopen makes (it must make none).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "documents"))
sys.path.insert(0, str(REPO / "tests"))  # server.fakes: a `hearth serve` for --scanned


def _rss_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _child(pdf: Path, questions: int, fact_page: int) -> dict[str, float]:
    """One round in this process: read, index, ask. Prints nothing; returns the figures."""
    from make_documents import FACT_QUESTION

    from hearth.documents import ChatDocuments, prepare_document
    from hearth.documents.index import DocumentIndex
    from hearth.history import ChatStore

    base = _rss_now()
    with tempfile.TemporaryDirectory() as tmp:
        store = ChatStore(Path(tmp) / "chats.db")
        t0 = time.perf_counter()
        prepared = prepare_document(pdf)
        t1 = time.perf_counter()
        docs = ChatDocuments(store)
        chat = store.create_chat("bench")
        msg = store.add_message(chat.id, None, "user", FACT_QUESTION)
        docs.on_sent(msg, [prepared], "", [], 4096)
        t2 = time.perf_counter()
        cited = docs.citations(msg.id)[0].section
        asks, ranks = [], []
        index = DocumentIndex(store.connection)
        doc_id = docs.attached(msg.id)[0].id
        parent = msg.id
        for n in range(questions):
            q = store.add_message(chat.id, parent, "user", f"{FACT_QUESTION} ({n})")
            start = time.perf_counter()
            docs.on_sent(q, [], "", store.path(chat.id)[:1], 4096)
            docs.message_text(q)
            asks.append(time.perf_counter() - start)
            start = time.perf_counter()
            index.search([doc_id], FACT_QUESTION, 20)
            ranks.append(time.perf_counter() - start)
        store.close()
    asks.sort()
    ranks.sort()
    return {
        "read_chunk_s": t1 - t0,
        "index_s": t2 - t1,
        "read_and_index_s": t2 - t0,
        "pages": prepared.document.pages,
        "chars": prepared.document.chars,
        "chunks": len(prepared.chunks),
        "question_median_ms": 1000 * statistics.median(asks),
        "question_p95_ms": 1000 * asks[int(0.95 * (len(asks) - 1))],
        "search_median_ms": 1000 * statistics.median(ranks),
        "search_p95_ms": 1000 * ranks[int(0.95 * (len(ranks) - 1))],
        "rss_after_imports_mb": base / 1e6,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6,
        "fact_found": float(cited == f"page {fact_page}"),
    }


def _scanned(rounds: int, host: str, model: str) -> dict[str, float]:
    """The one-time cost of a scanned page and the cost of reopening it (see the docstring)."""
    from make_documents import scanned_text_pdf, text_picture

    import hearth.documents.scanned as scanned
    from hearth.documents import ChatDocuments, prepare_document
    from hearth.history import ChatStore

    figures: dict[str, list[float]] = {}

    def note(key: str, value: float) -> None:
        figures.setdefault(key, []).append(value)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for n in range(rounds):
            print(f"round {n + 1} of {rounds}", file=sys.stderr)
            pdf = scanned_text_pdf(
                folder / f"scan{n}.pdf", [text_picture(["INVOICE 4471", "Total due: 312 euros"])]
            )
            reader = scanned.Transcriber(host, model=model)
            start = time.perf_counter()
            png = scanned.render_page(pdf, 2)
            note("render_ms", 1000 * (time.perf_counter() - start))
            reader.vision_model()
            start = time.perf_counter()
            reply = scanned.post_json(host, "/api/chat", reader.request(png), "", 3600.0)
            note("first_transcribe_s" if n == 0 else "transcribe_s", time.perf_counter() - start)
            for key in ("load_duration", "prompt_eval_duration", "eval_duration"):
                note(key.replace("duration", "s"), reply.get(key, 0) / 1e9)
            note("tokens", float(reply.get("eval_count", 0)))
            note("prompt_tokens", float(reply.get("prompt_eval_count", 0)))
            start = time.perf_counter()
            prepared = prepare_document(pdf, transcriber=reader)
            note("prepare_s", time.perf_counter() - start)
            note("chars", float(len(prepared.document.sections[1].text)))
            db = folder / f"chats{n}.db"
            store = ChatStore(db)
            chat = store.create_chat(model)
            msg = store.add_message(chat.id, None, "user", "What is due?")
            ChatDocuments(store).on_sent(msg, [prepared], "", [], 4096)
            store.close()
            pdf.unlink()
            calls = {"render": 0, "service": 0}
            real_render, real_post = scanned.render_page, scanned.post_json

            def counted(kind, real, calls=calls):
                def call(*a, **k):
                    calls[kind] += 1
                    return real(*a, **k)

                return call

            scanned.render_page = counted("render", real_render)
            scanned.post_json = counted("service", real_post)
            try:
                start = time.perf_counter()
                store = ChatStore(db)
                docs = ChatDocuments(store)
                text = docs.message_text(store.message(msg.id))
                docs.citations(msg.id)
                note("reopen_ms", 1000 * (time.perf_counter() - start))
                store.close()
            finally:
                scanned.render_page, scanned.post_json = real_render, real_post
            note("reopen_renders", float(calls["render"]))
            note("reopen_model_calls", float(calls["service"]))
            note("reopen_has_text", float(prepared.document.sections[1].text in text))
    return {k: statistics.median(v) for k, v in figures.items()}


def _scanned_main(args: argparse.Namespace) -> int:
    host, model, live, work = args.host, args.vision_model, None, None
    if not (host and model):
        import httpx
        from server.fakes import start_server, stop_server

        from hearth_gemma3.testing import build_tiny_gemma3_vision

        work = Path(tempfile.mkdtemp(prefix="bench-scan-"))
        files = build_tiny_gemma3_vision(work / "gemma3-vision")
        live = start_server(work / "home", None, {"HEARTH_OFFLINE": "1"})
        host, model = live.url, "tiny-vision"
        body = {"model": model, "from": str(files.text), "projector": str(files.mmproj),
                "stream": False}  # fmt: skip
        httpx.post(host + "/api/create", json=body, timeout=300).raise_for_status()
    try:
        figures = _scanned(args.rounds, host, model)
    finally:
        if live is not None:
            stop_server(live)
        if work is not None:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    figures["rounds"] = args.rounds
    print(
        f"a scanned page through {model}"
        + (" (the tiny random test model)" if live else "")
        + f", median of {args.rounds} rounds:\n"
        f"  render (PDFium)        {figures['render_ms']:.0f} ms\n"
        f"  transcribe (/api/chat) {figures.get('transcribe_s', 0):.2f} s warm, "
        f"{figures['first_transcribe_s']:.2f} s the first time (model load)\n"
        f"    of which (warm): load {figures['load_s']:.2f} s, prompt "
        f"{figures['prompt_eval_s']:.2f} s ({figures['prompt_tokens']:.0f} tokens evaluated,"
        " the rest from the prompt cache), "
        f"{figures['tokens']:.0f} tokens written {figures['eval_s']:.2f} s\n"
        f"  prepare_document       {figures['prepare_s']:.2f} s "
        f"({figures['chars']:.0f} characters transcribed)\n"
        f"  reopen                 {figures['reopen_ms']:.1f} ms, "
        f"{figures['reopen_renders']:.0f} renders, {figures['reopen_model_calls']:.0f} model calls"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    ok = figures["reopen_renders"] == 0 == figures["reopen_model_calls"]
    return 0 if ok and figures["reopen_has_text"] else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pages", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--questions", type=int, default=20)
    p.add_argument("--json", type=Path, help="write the figures here too")
    p.add_argument("--scanned", action="store_true", help="measure a scanned page instead")
    p.add_argument("--host", default="", help="--scanned: the service (default: start one)")
    p.add_argument("--vision-model", default="", help="--scanned: the vision model to use")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--fact-page", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.questions, args.fact_page)))
        return 0
    if args.scanned:
        return _scanned_main(args)
    from make_documents import long_pdf

    fact_page = max(1, args.pages * 3 // 4)
    with tempfile.TemporaryDirectory() as tmp:
        pdf = long_pdf(Path(tmp) / "long.pdf", args.pages, fact_page)
        size = pdf.stat().st_size
        rounds = []
        for _ in range(args.rounds):
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(pdf), "--questions",
                 str(args.questions), "--fact-page", str(fact_page)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            rounds.append(json.loads(out.stdout.strip().splitlines()[-1]))
    figures = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    figures["pdf_bytes"] = size
    figures["rounds"] = args.rounds
    print(
        f"{args.pages}-page PDF ({size / 1e6:.2f} MB, {figures['chars']:,.0f} characters, "
        f"{figures['chunks']:.0f} chunks), median of {args.rounds} rounds:\n"
        f"  read + chunk   {figures['read_chunk_s']:.2f} s\n"
        f"  index (FTS5)   {figures['index_s']:.2f} s\n"
        f"  question       {figures['question_median_ms']:.1f} ms median, "
        f"{figures['question_p95_ms']:.1f} ms p95 (rank, choose, store, render)\n"
        f"  BM25 ranking   {figures['search_median_ms']:.1f} ms median, "
        f"{figures['search_p95_ms']:.1f} ms p95\n"
        f"  peak RSS       {figures['peak_rss_mb']:.0f} MB "
        f"({figures['rss_after_imports_mb']:.0f} MB after imports)\n"
        f"  fact on page {fact_page} cited first: {'yes' if figures['fact_found'] else 'NO'}"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if figures["fact_found"] else 1


if __name__ == "__main__":
    sys.exit(main())
