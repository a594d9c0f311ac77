"""Token counter accuracy: the default heuristic against a real BPE vocabulary.

For every shared corpus this counts each file with the heuristic and with the
``cl100k_base`` (and ``o200k_base``) BPE shipped by ``bpe-openai`` and reports
the corpus-level ratio (sum heuristic / sum BPE), the median and p90 per-file
absolute error, and the counting speed. The numbers go into ``docs/tokens.md``.

    python benchmarks/bench_tokens.py [--small] [--json PATH]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import print_table, write_results  # noqa: E402
from corpora import corpus_texts  # noqa: E402
from ctxos.services.tokens import BpeCounter, HeuristicCounter  # noqa: E402

CORPORA = ("obsidian-help", "tldr", "dendron-vault", "foam-docs", "locomo-dev")


def measure(texts: list[str], reference, heuristic) -> dict:
    ref_total = heu_total = 0
    errors: list[float] = []
    t_ref = t_heu = 0.0
    for text in texts:
        t0 = time.perf_counter()
        r = reference.count(text)
        t1 = time.perf_counter()
        h = heuristic.count(text)
        t2 = time.perf_counter()
        t_ref += t1 - t0
        t_heu += t2 - t1
        ref_total += r
        heu_total += h
        if r >= 20:
            errors.append(abs(h - r) / r)
    errors.sort()
    return {
        "files": len(texts),
        "bpe_tokens": ref_total,
        "heuristic_tokens": heu_total,
        "ratio": heu_total / ref_total if ref_total else 1.0,
        "median_file_error": statistics.median(errors) if errors else 0.0,
        "p90_file_error": errors[int(0.9 * (len(errors) - 1))] if errors else 0.0,
        "heuristic_mtok_per_s": heu_total / t_heu / 1e6 if t_heu else 0.0,
        "bpe_mtok_per_s": ref_total / t_ref / 1e6 if t_ref else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="at most 60 files per corpus")
    parser.add_argument("--json", type=Path, default=None, help="where to write the JSON results")
    parser.add_argument("--encoding", action="append", default=None)
    args = parser.parse_args(argv)
    encodings = args.encoding or ["cl100k_base", "o200k_base"]
    limit = 60 if args.small else 1500
    heuristic = HeuristicCounter()
    rows = []
    results: dict = {"encodings": {}}
    for encoding in encodings:
        reference = BpeCounter(encoding)
        results["encodings"][encoding] = {}
        for corpus in CORPORA:
            texts = corpus_texts(corpus)
            random.Random(7).shuffle(texts)
            stats = measure(texts[:limit], reference, heuristic)
            results["encodings"][encoding][corpus] = stats
            rows.append(
                [
                    encoding,
                    corpus,
                    stats["files"],
                    stats["bpe_tokens"],
                    stats["heuristic_tokens"],
                    f"{(stats['ratio'] - 1) * 100:+.1f}%",
                    f"{stats['median_file_error'] * 100:.1f}%",
                    f"{stats['p90_file_error'] * 100:.1f}%",
                ]
            )
    print_table(
        ["encoding", "corpus", "files", "BPE tokens", "heuristic", "total diff", "median |err|/file", "p90 |err|/file"],
        rows,
    )
    write_results("tokens", results, args.json, small=args.small)
    return 0


if __name__ == "__main__":
    sys.exit(main())
