"""Issue 64: does a query-side adapter over bge-small-en-v1.5, trained on pairs mined from installed
code (:mod:`benchmarks.code_pairs`), move dense code search?  One command mines the pairs, writes
the queries, embeds them, trains every variant, scores it, and writes the chosen one as the
shipped file (:data:`situate.resources.models.code_adapter.ADAPTERS`):

    python -m benchmarks.code_adapter --out benchmarks/reports/code-adapter \
        --ship resources/models/data/code-adapter-bge-small-en-v1.5.npy

Two kinds of query for a mined function (``--queries``):

* ``generated`` (the default): the web search a developer would type for it, written by the local
  coder model (the blurb model, greedy) from the docstring's first sentence (:data:`QUERY_PROMPT`:
  two made-up examples, none from an evaluation set), for the first ``--generate`` train pairs;
  the last tenth of them is the validation slice.
* ``descriptions``: the docstring's first sentence itself, for ``--train`` pairs; the mined
  validation slice (1,000 pairs) is scored.

Dense ranking alone (no BM25, no fusion, no structural context): each CoSQA function's text is
embedded as a document, each query with the embedder's query instruction; MRR@10, Pass@5 and
Pass@20 of the plain query vector against the adapted one ``normalise(q @ W)``, on CoSQA's dev
half (500 web searches over 6,267 functions: for choosing, never trained on) and on the mined
validation slice.  ``W`` (384 x 384) is trained from the identity with InfoNCE over in-batch
negatives (Adam, a pull back towards the identity), either whole or as ``I + U V`` of a low rank.

Writes ``OUT.json`` and ``OUT.md``: every variant's figures, the seconds of mining, writing the
queries, embedding and each training on this CPU (its flags in the report), and the sha256 of each
``W`` (float32, C order): the same embeddings train the same bytes.  The variant chosen is the one
with the highest mean of CoSQA dev's Pass@5 and Pass@20 (the dev half chooses; nothing is
trained on it).  The generated queries and embeddings are kept in ``--cache`` (default
``/tmp/code-adapter``) and reused for the same pairs file.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.working_copy import cpu_flags

BATCH = 256
LEARNING_RATE = 1e-3
#: The prompt that turns a docstring's first sentence into a developer's web search (ChatML of the
#: blurb model, Qwen2.5-Coder-0.5B-Instruct by default); its two examples are made up for it.
QUERY_PROMPT = (
    "<|im_start|>system\nYou turn descriptions of Python functions into the short web searches programmers "
    "type.<|im_end|>\n<|im_start|>user\nReturn the number of whole days between two datetime objects.<|im_end|>"
    "\n<|im_start|>assistant\npython number of days between two dates<|im_end|>\n<|im_start|>user\nRead a CSV "
    "file and return its rows as dictionaries keyed by the header.<|im_end|>\n<|im_start|>assistant\nhow to read "
    "csv into list of dicts in python<|im_end|>\n<|im_start|>user\n{desc}<|im_end|>\n<|im_start|>assistant\n"
)


@dataclasses.dataclass(frozen=True)
class Variant:
    """One way to train ``W``: InfoNCE temperature (bge-small was trained at 0.01-0.02), the pull
    towards the identity (an L2 penalty on ``W - I``), epochs, a rank (0: the whole matrix), and
    whether each batch also holds each pair's BM25-mined hard negative (:func:`hard_negatives`)."""

    temperature: float
    pull: float
    epochs: int = 4
    rank: int = 0
    hard: bool = False

    @property
    def name(self) -> str:
        shape = f"rank {self.rank}" if self.rank else "full"
        hard = ", BM25 hard negatives" if self.hard else ""
        return f"{shape}, t={self.temperature:g}, pull={self.pull:g}, {self.epochs} epochs{hard}"


#: The variants measured (docs/quality.md, "Code search: an adapter learnt from installed code").
VARIANTS = [
    Variant(0.05, 1e-2),
    Variant(0.02, 1e-2),
    Variant(0.02, 1e-1),
    Variant(0.02, 1.0, epochs=8),
    Variant(0.01, 1.0, epochs=8),
    Variant(0.02, 1e-2, hard=True),
    Variant(0.02, 1.0, epochs=8, hard=True),
    Variant(0.02, 1e-2, rank=32),
    Variant(0.02, 1.0, epochs=8, rank=32),
]


def _normed(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _adam(params: list[np.ndarray], grads: list[np.ndarray], state: dict) -> None:
    state["t"] = t = state.get("t", 0) + 1
    for i, (p, g) in enumerate(zip(params, grads)):
        m, v = state.setdefault(("m", i), np.zeros_like(p)), state.setdefault(("v", i), np.zeros_like(p))
        m *= 0.9
        m += 0.1 * g
        v *= 0.999
        v += 0.001 * g * g
        p -= LEARNING_RATE * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)


def _infonce_grad(qb: np.ndarray, z: np.ndarray, db: np.ndarray, temperature: float) -> np.ndarray:
    """d loss / d z for ``z = adapted queries`` (before normalising): ``db``'s first ``len(qb)``
    rows are the queries' own documents, the rest (other pairs' documents, hard negatives) not."""
    norm = np.linalg.norm(z, axis=1, keepdims=True)
    zn = z / norm
    logits = zn @ db.T / temperature
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    p[:, : len(qb)] -= np.eye(len(qb))  # each query's own document is the first len(qb) rows
    g_zn = (p / len(qb) / temperature) @ db
    return (g_zn - zn * (g_zn * zn).sum(axis=1, keepdims=True)) / norm


def hard_negatives(descriptions: list[str], codes: list[str]) -> np.ndarray:
    """For each pair, the other pair's code that BM25 (bm25s, identifiers split) ranks highest for
    its description: int[n], the index of that code."""
    import bm25s

    from situate.resources.store.retrieval import tokenize

    retriever = bm25s.BM25()
    retriever.index(tokenize(codes, identifiers=True), show_progress=False)
    tokens = tokenize(descriptions, identifiers=True)
    words = {i: w for w, i in tokens.vocab.items()}
    out = (np.arange(len(codes)) + 1) % len(codes)  # no term BM25 knows: the next pair's code
    for i, ids in enumerate(tokens.ids):
        terms = [words[t] for t in ids if words[t] in retriever.vocab_dict]
        if terms:
            scores = retriever.get_scores(terms)
            scores[i] = -1.0
            out[i] = int(np.argmax(scores))
    return out


def train(q: np.ndarray, d: np.ndarray, variant: Variant, hard: np.ndarray | None = None, seed: int = 0) -> np.ndarray:
    """``W`` (float32[dim, dim]) with ``normalise(q @ W)`` closer to each pair's ``d`` than to the
    batch's others (and, with ``variant.hard``, to each pair's hard negative ``d[hard[i]]``);
    ``q``, ``d``: float32[n, dim], L2-normalised."""
    rng = np.random.default_rng(seed)
    dim = q.shape[1]
    eye = np.eye(dim)
    if variant.rank:
        u, v = rng.normal(0, 1e-3, (dim, variant.rank)), np.zeros((variant.rank, dim))
        params = [u, v]
    else:
        params = [eye.copy()]
    state: dict = {}
    for _ in range(variant.epochs):
        order = rng.permutation(len(q))
        for start in range(0, len(q) - BATCH + 1, BATCH):
            idx = order[start : start + BATCH]
            qb, db = q[idx].astype(np.float64), d[idx].astype(np.float64)
            if variant.hard:
                db = np.concatenate([db, d[hard[idx]].astype(np.float64)])
            if variant.rank:
                u, v = params
                g_z = _infonce_grad(qb, qb + qb @ u @ v, db, variant.temperature)
                grads = [qb.T @ (g_z @ v.T) + variant.pull * u, (qb @ u).T @ g_z + variant.pull * v]
            else:
                g_z = _infonce_grad(qb, qb @ params[0], db, variant.temperature)
                grads = [qb.T @ g_z + variant.pull * (params[0] - eye)]
            _adam(params, grads, state)
    w = eye + params[0] @ params[1] if variant.rank else params[0]
    return w.astype(np.float32)


def ranks_of(qv: np.ndarray, dv: np.ndarray, golden: list[int]) -> np.ndarray:
    """1-based rank of each query's golden document under cosine (ties counted in its favour)."""
    sims = qv @ dv.T
    own = sims[np.arange(len(golden)), golden]
    return (sims > own[:, None]).sum(axis=1) + 1


def figures(ranks: np.ndarray) -> dict:
    """MRR@10 and Pass@5 / Pass@20 (percent) of 1-based ranks."""
    return {
        "mrr@10": round(float(np.where(ranks <= 10, 1 / ranks, 0).mean()), 4),
        "pass@5": round(100 * float((ranks <= 5).mean()), 2),
        "pass@20": round(100 * float((ranks <= 20).mean()), 2),
    }


def train_pairs(pairs_path: Path, n: int) -> tuple[list[dict], list[dict]]:
    """The first ``n`` train pairs in a seeded shuffle (seed 0) of the mined pairs, and the first
    1,000 of the mined validation slice."""
    pairs = [json.loads(line) for line in gzip.decompress(pairs_path.read_bytes()).decode().splitlines()]
    order = np.random.default_rng(0).permutation(len(pairs))
    train = [pairs[i] for i in order if pairs[i]["split"] == "train"][:n]
    return train, [p for p in pairs if p["split"] == "validation"][:1000]


def generated_queries(pairs: list[dict], path: Path) -> tuple[list[str], float]:
    """A developer's web search for each pair, written by the blurb model from its description
    (:data:`QUERY_PROMPT`, greedy, one line of at most 24 tokens); the ones already in ``path`` (one
    JSON line ``{"hash", "query"}`` a pair) are kept, new ones appended.  Returns the queries and
    the seconds spent writing new ones."""
    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            row = json.loads(line)
            done[row["hash"]] = row["query"]
    todo = [p for p in pairs if p["hash"] not in done]
    t0 = time.perf_counter()
    if todo:
        from situate.pipelines.settings import resources_from_env

        llm = resources_from_env(plain=True)["llm"]
        tok = llm.tokenizer()
        with path.open("a") as f:
            for p in todo:
                prompt = tok.encode_template(QUERY_PROMPT.format(desc=p["description"]), False)
                text = llm.generate(prompt, stop=["\n", "<|im_end|>"], max_tokens=24).text
                done[p["hash"]] = text.strip().strip('"')
                f.write(json.dumps({"hash": p["hash"], "query": done[p["hash"]]}) + "\n")
    return [done[p["hash"]] for p in pairs], time.perf_counter() - t0


def with_docstring(code: str, description: str) -> str:
    """``code`` (a mined function, its docstring removed) with ``description`` put back as a
    one-line docstring under its signature (the first line ending in ``:`` outside brackets), as
    the functions of a user's folder and of CoSQA keep theirs.

    >>> print(with_docstring("def f(a,\\n      b):\\n    return a", "Add."))
    def f(a,
          b):
        \"\"\"Add.\"\"\"
        return a
    """
    lines = code.split("\n")
    depth = 0
    for i, line in enumerate(lines):
        depth += sum(line.count(c) for c in "([{") - sum(line.count(c) for c in ")]}")
        if depth <= 0 and line.split("#")[0].rstrip().endswith(":"):
            body = next((x for x in lines[i + 1 :] if x.strip()), "    pass")
            indent = body[: len(body) - len(body.lstrip())] or "    "
            quoted = description.replace('"""', "'''")
            return "\n".join(lines[: i + 1] + [f'{indent}"""{quoted}"""'] + lines[i + 1 :])
    return code


def embedded(
    pairs_path: Path, mode: str, n: int, cache: Path, docstring: bool = False, written: Path | None = None
) -> tuple[dict, dict]:
    """The embeddings of the train and validation pairs of ``mode`` and of CoSQA's functions and dev
    queries (from ``cache`` when it holds them for these pairs), and the seconds each step took.
    With ``docstring``, each pair's code is embedded with its description as its docstring
    (:func:`with_docstring`)."""
    from situate.evaluation.data import corpus_file, queries_file
    from situate.evaluation.metrics import load_queries
    from situate.pipelines.settings import resources_from_env

    key = f"{hashlib.sha256(pairs_path.read_bytes()).hexdigest()[:16]}-{mode}-{n}"
    train, val = train_pairs(pairs_path, n)
    seconds = {"write_queries": 0.0}
    if mode == "generated":
        path = cache / f"{key}.queries.jsonl"
        # queries written before (gzipped JSON lines): only the missing ones are asked for
        if written and not path.exists():
            cache.mkdir(parents=True, exist_ok=True)
            path.write_bytes(gzip.decompress(written.read_bytes()))
        queries, seconds["write_queries"] = generated_queries(train, path)
        kept = [i for i, q in enumerate(queries) if len(q.split()) >= 2]  # an empty or one-word answer: left out
        cut = len(kept) * 9 // 10
        asked = [{**train[i], "description": queries[i], "original_description": train[i]["description"]} for i in kept]
        train, val = asked[:cut], asked[cut:]
    if docstring:
        for p in train + val:
            p["code"] = with_docstring(p["code"], p.get("original_description", p["description"]))
        key += "-docstring"
    texts = cache / f"{key}.texts.json"  # the query texts, for the fine-tune (benchmarks.code_encoder)
    texts.write_text(
        json.dumps(
            {
                "train": [p["description"] for p in train],
                "train_hash": [p["hash"] for p in train],
                "validation": [p["description"] for p in val],
                "validation_hash": [p["hash"] for p in val],
                "train_code": [p["code"] for p in train],
            }
        )
    )
    path = cache / f"{key}.npz"
    if path.exists():
        return dict(np.load(path)), seconds | {"embed": 0.0}
    t0 = time.perf_counter()
    emb = resources_from_env(plain=True)["embedder"]
    corpus = json.loads(corpus_file("cosqa").read_text())
    cq = load_queries(queries_file("cosqa"))
    index = {e["doc_id"]: i for i, e in enumerate(corpus)}
    cache.mkdir(parents=True, exist_ok=True)
    cosqa = cache / "cosqa-dev.npz"  # the same for every pairs file: embedded once a cache
    if not cosqa.exists():
        np.savez(
            cosqa,
            cosqa_q=emb.embed([q.query for q in cq], emb.query_prefix)[0],
            cosqa_d=emb.embed([e["content"] for e in corpus], emb.document_prefix)[0],
            cosqa_golden=np.array([index[q.golden[0][0]] for q in cq]),
        )
    out = {
        "train_hard": hard_negatives([p["description"] for p in train], [p["code"] for p in train]),
        "train_q": emb.embed([p["description"] for p in train], emb.query_prefix)[0],
        "train_d": emb.embed([p["code"] for p in train], emb.document_prefix)[0],
        "val_q": emb.embed([p["description"] for p in val], emb.query_prefix)[0],
        "val_d": emb.embed([p["code"] for p in val], emb.document_prefix)[0],
        **np.load(cosqa),
    }
    np.savez(path, **out)
    return out, seconds | {"embed": time.perf_counter() - t0}


def scored(w: np.ndarray | None, e: dict) -> dict:
    """The validation slice's and CoSQA dev's figures with ``w`` (None: the plain vector)."""
    adapt = (lambda x: x) if w is None else (lambda x: _normed(x @ w))
    return {
        "validation": figures(ranks_of(adapt(e["val_q"]), e["val_d"], list(range(len(e["val_q"]))))),
        "cosqa_dev_dense": figures(ranks_of(adapt(e["cosqa_q"]), e["cosqa_d"], list(e["cosqa_golden"]))),
    }


def markdown(report: dict) -> str:
    """The report as a Markdown table."""
    s = report["seconds"]
    lines = [
        f"Code adapter, queries: {report['queries']}; dense ranking alone ({report['cpu']}); "
        f"{report['train_pairs']:,} train pairs, {report['validation_pairs']:,} validation pairs; mined in "
        f"{s['mine']} s, queries written in {s['write_queries']} s, embedded in {s['embed']} s.",
        "",
        "| variant | train s | validation MRR@10 | validation Pass@5 "
        "| CoSQA dev MRR@10 | CoSQA dev Pass@5 | CoSQA dev Pass@20 |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["variants"]:
        m, c = row["validation"], row["cosqa_dev_dense"]
        mark = " **(chosen)**" if row["name"] == report.get("chosen") else ""
        lines.append(
            f"| {row['name']}{mark} | {row['train_seconds']} | {m['mrr@10']:.4f} | {m['pass@5']:.1f} | "
            f"{c['mrr@10']:.4f} | {c['pass@5']:.1f} | {c['pass@20']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def chosen(rows: list[dict]) -> dict:
    """The trained variant with the highest mean of CoSQA dev's Pass@5 and Pass@20 (then MRR@10)."""

    def key(row):
        c = row["cosqa_dev_dense"]
        return (c["pass@5"] + c["pass@20"], c["mrr@10"])

    return max(rows[1:], key=key)


def main(argv: list[str] | None = None) -> int:
    from benchmarks import code_pairs

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="path without extension")
    ap.add_argument("--queries", choices=("generated", "descriptions"), default="generated")
    ap.add_argument("--pairs", help="a mined pairs file (default: mine them now into --cache)")
    ap.add_argument("--train", type=int, default=20000, help="descriptions: mined pairs trained on")
    ap.add_argument("--generate", type=int, default=4000, help="generated: pairs a query is written for")
    ap.add_argument("--cache", default="/tmp/code-adapter")
    ap.add_argument("--ship", help="write the chosen W here (.npy, float32)")
    ap.add_argument("--written", help="queries written before (benchmarks/reports/code-adapter-queries.jsonl.gz)")
    ap.add_argument("--docstring", action="store_true", help="embed each pair's code with its docstring put back")
    args = ap.parse_args(argv)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    pairs = Path(args.pairs) if args.pairs else cache / "code-pairs.jsonl.gz"
    if not args.pairs:
        code_pairs.main(["--out", str(cache / "code-pairs")])
    t_mine = time.perf_counter() - t0
    n = args.generate if args.queries == "generated" else args.train
    e, seconds = embedded(pairs, args.queries, n, cache, args.docstring, Path(args.written) if args.written else None)
    rows = [{"name": "plain bge-small (no adapter)", "train_seconds": 0, **scored(None, e)}]
    weights = {}
    for variant in VARIANTS:
        t1 = time.perf_counter()
        weights[variant.name] = w = train(e["train_q"], e["train_d"], variant, e["train_hard"])
        row = {"name": variant.name, "train_seconds": round(time.perf_counter() - t1, 1), **scored(w, e)}
        row["sha256"] = hashlib.sha256(np.ascontiguousarray(w).tobytes()).hexdigest()
        rows.append(row)
        print(json.dumps(row), flush=True)
    best = chosen(rows)
    report = {
        "cpu": cpu_flags(),
        "queries": args.queries,
        "pairs_sha256": hashlib.sha256(pairs.read_bytes()).hexdigest(),
        "train_pairs": len(e["train_q"]),
        "validation_pairs": len(e["val_q"]),
        "seconds": {"mine": round(t_mine, 1), **{k: round(v, 1) for k, v in seconds.items()}},
        "variants": rows,
        "chosen": best["name"],
    }
    if args.ship:
        np.save(args.ship, weights[best["name"]])
        report["shipped"] = {"path": args.ship, "sha256": hashlib.sha256(Path(args.ship).read_bytes()).hexdigest()}
    report["seconds"]["all"] = round(time.perf_counter() - t0, 1)
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
