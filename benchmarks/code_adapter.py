"""A probe for issue 64: does a query-side linear adapter over bge-small-en-v1.5, trained on pairs
mined from installed code (:mod:`benchmarks.code_pairs`), move dense code search?

Dense ranking alone (no BM25, no fusion, no structural context): each CoSQA function's text is
embedded as a document, each query with the embedder's query instruction; MRR@10 and Pass@5 of
the plain query vector against the adapted one ``normalise(q @ W)``.  ``W`` (384 x 384) starts at
the identity and is trained with in-batch negatives (InfoNCE, temperature 0.05, Adam, a pull back
towards the identity), on ``--train`` mined pairs; the mined validation slice is scored too.  Not
the default search: a first figure to decide whether the adapter is worth building into it.

    python -m benchmarks.code_pairs --out /tmp/code-pairs
    python -m benchmarks.code_adapter --pairs /tmp/code-pairs.jsonl.gz --out benchmarks/reports/code-adapter-probe
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.working_copy import cpu_flags

TEMPERATURE = 0.05
BATCH = 256
EPOCHS = 4
LEARNING_RATE = 1e-3
PULL_TO_IDENTITY = 1e-2


def _normed(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def train(q: np.ndarray, d: np.ndarray, seed: int = 0) -> np.ndarray:
    """``W`` with ``normalise(q @ W)`` closer to each pair's ``d`` than to the batch's others."""
    rng = np.random.default_rng(seed)
    dim = q.shape[1]
    w = np.eye(dim, dtype=np.float64)
    m, v, t = np.zeros_like(w), np.zeros_like(w), 0
    for _ in range(EPOCHS):
        order = rng.permutation(len(q))
        for start in range(0, len(q) - BATCH + 1, BATCH):
            idx = order[start : start + BATCH]
            qb, db = q[idx].astype(np.float64), d[idx].astype(np.float64)
            z = qb @ w
            norm = np.linalg.norm(z, axis=1, keepdims=True)
            zn = z / norm
            logits = zn @ db.T / TEMPERATURE
            logits -= logits.max(axis=1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(axis=1, keepdims=True)
            g_logits = (p - np.eye(len(idx))) / len(idx) / TEMPERATURE
            g_zn = g_logits @ db
            g_z = (g_zn - zn * (g_zn * zn).sum(axis=1, keepdims=True)) / norm
            grad = qb.T @ g_z + PULL_TO_IDENTITY * (w - np.eye(dim))
            t += 1
            m = 0.9 * m + 0.1 * grad
            v = 0.999 * v + 0.001 * grad**2
            w -= LEARNING_RATE * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
    return w.astype(np.float32)


def ranks_of(qv: np.ndarray, dv: np.ndarray, golden: list[int]) -> np.ndarray:
    """1-based rank of each query's golden document under cosine."""
    sims = qv @ dv.T
    own = sims[np.arange(len(golden)), golden]
    return (sims > own[:, None]).sum(axis=1) + 1


def figures(ranks: np.ndarray) -> dict:
    return {
        "mrr@10": round(float(np.where(ranks <= 10, 1 / ranks, 0).mean()), 4),
        "pass@5": round(100 * float((ranks <= 5).mean()), 2),
        "pass@20": round(100 * float((ranks <= 20).mean()), 2),
    }


def main(argv: list[str] | None = None) -> int:
    from situate.evaluation.data import corpus_file, queries_file
    from situate.evaluation.metrics import load_queries
    from situate.pipelines.settings import resources_from_env

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--train", type=int, default=8000, help="mined pairs trained on")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    pairs = [json.loads(line) for line in gzip.open(args.pairs, "rt", encoding="utf-8")]
    rng = np.random.default_rng(0)
    train_pairs = [pairs[i] for i in rng.permutation(len(pairs)) if pairs[i]["split"] == "train"][: args.train]
    val_pairs = [p for p in pairs if p["split"] == "validation"][:1000]
    emb = resources_from_env(plain=True)["embedder"]

    def docs(texts):
        return emb.embed(texts, emb.document_prefix)[0]

    def queries(texts):
        return emb.embed(texts, emb.query_prefix)[0]

    tq, td = queries([p["description"] for p in train_pairs]), docs([p["code"] for p in train_pairs])
    vq, vd = queries([p["description"] for p in val_pairs]), docs([p["code"] for p in val_pairs])
    t_embed = time.perf_counter() - t0
    w = train(tq, td)
    t_train = time.perf_counter() - t0 - t_embed
    corpus = json.loads(corpus_file("cosqa").read_text())
    index = {e["doc_id"]: i for i, e in enumerate(corpus)}
    cq = load_queries(queries_file("cosqa"))
    cd = docs([e["content"] for e in corpus])
    qv = queries([q.query for q in cq])
    golden = [index[q.golden[0][0]] for q in cq]
    result = {
        "cpu": cpu_flags(),
        "train_pairs": len(train_pairs),
        "validation_pairs": len(val_pairs),
        "seconds": {"embed_pairs": round(t_embed, 1), "train": round(t_train, 1)},
        "mined_validation": {
            "plain": figures(ranks_of(vq, vd, list(range(len(vq))))),
            "adapter": figures(ranks_of(_normed(vq @ w), vd, list(range(len(vq))))),
        },
        "cosqa_dev_dense": {
            "plain": figures(ranks_of(qv, cd, golden)),
            "adapter": figures(ranks_of(_normed(qv @ w), cd, golden)),
        },
    }
    result["seconds"]["all"] = round(time.perf_counter() - t0, 1)
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
