"""Documents: the time to read and index a long PDF, the retrieval latency, and peak memory.

    .venv/bin/python bench/documents.py [--pages 300] [--rounds 3] [--questions 20] [--json OUT]

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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pages", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--questions", type=int, default=20)
    p.add_argument("--json", type=Path, help="write the figures here too")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--fact-page", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.questions, args.fact_page)))
        return 0
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
