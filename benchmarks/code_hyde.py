"""Issue 64: a query-time expansion with the local coder model (HyDE, Gao et al., ACL 2023), on
the same footing as :mod:`benchmarks.code_adapter`: dense ranking alone over CoSQA's dev half.

For each query the blurb model (Qwen2.5-Coder-0.5B-Instruct by default) writes a short Python
function (greedy, at most ``--tokens`` tokens after ``def``); the function is embedded as a document
and added to the query's vector, ``normalise(q + a h)``, for each weight ``a``.  Reports each weight's
MRR@10 / Pass@5 / Pass@20 and the seconds a query the generation took on this CPU.

    python -m benchmarks.code_hyde --out benchmarks/reports/code-hyde

The generated functions are written to ``OUT.generated.json.gz``; ``--generated FILE`` scores a
saved file again without the LLM (then no seconds are measured).
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

from benchmarks.code_adapter import _normed, figures, ranks_of
from benchmarks.working_copy import cpu_flags

#: The prompt, in the model's ChatML; the answer is primed with a fenced ``def`` so the model
#: writes code, not prose about it.
PROMPT = (
    "<|im_start|>system\nYou are a Python programmer.<|im_end|>\n"
    "<|im_start|>user\nWrite a short Python function for: {query}<|im_end|>\n"
    "<|im_start|>assistant\n```python\ndef "
)
#: Weights ``a`` of the generated function's vector.
WEIGHTS = (0.3, 0.5, 0.7, 1.0)


def generate(queries: list[str], max_tokens: int) -> tuple[list[str], float]:
    """One function per query from the blurb model, and the seconds it took in all."""
    from situate.pipelines.settings import resources_from_env

    llm = resources_from_env(plain=True)["llm"]
    tok = llm.tokenizer()
    t0 = time.perf_counter()
    out = []
    for q in queries:
        g = llm.generate(tok.encode_template(PROMPT.format(query=q), False), stop=["```"], max_tokens=max_tokens)
        out.append("def " + g.text)
    return out, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    from situate.evaluation.data import corpus_file, queries_file
    from situate.evaluation.metrics import load_queries
    from situate.pipelines.settings import resources_from_env

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="path without extension")
    ap.add_argument("--tokens", type=int, default=64, help="generated tokens at most, a query")
    ap.add_argument("--generated", help="score this saved OUT.generated.json.gz instead of generating")
    args = ap.parse_args(argv)
    corpus = json.loads(corpus_file("cosqa").read_text())
    queries = load_queries(queries_file("cosqa"))
    golden = [{e["doc_id"]: i for i, e in enumerate(corpus)}[q.golden[0][0]] for q in queries]
    out = Path(args.out)
    if args.generated:
        functions, seconds = json.loads(gzip.open(args.generated, "rt").read()), None
    else:
        functions, seconds = generate([q.query for q in queries], args.tokens)
        with gzip.GzipFile(out.with_suffix(".generated.json.gz"), "wb", mtime=0) as f:
            f.write(json.dumps(functions, indent=0).encode())
    emb = resources_from_env(plain=True)["embedder"]
    dv = emb.embed([e["content"] for e in corpus], emb.document_prefix)[0]
    qv = emb.embed([q.query for q in queries], emb.query_prefix)[0]
    hv = emb.embed(functions, emb.document_prefix)[0]
    rows = {"plain query": figures(ranks_of(qv, dv, golden))}
    for a in WEIGHTS:
        rows[f"query + {a:g} x generated function"] = figures(ranks_of(_normed(qv + a * hv), dv, golden))
    rows["generated function alone"] = figures(ranks_of(hv, dv, golden))
    report = {
        "cpu": cpu_flags(),
        "queries": len(queries),
        "max_tokens": args.tokens,
        "seconds_a_query": None if seconds is None else round(seconds / len(queries), 2),
        "cosqa_dev_dense": rows,
    }
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
