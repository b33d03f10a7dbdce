"""Issue 64, the second way to learn: fine-tune bge-small-en-v1.5's *query* side on the generated
web searches for installed code, and measure it against the linear map (:mod:`benchmarks.code_adapter`).

The documents stay embedded by the shipped INT8 ONNX model (nothing is re-embedded): only the
encoder that turns a query into the vector compared with code chunks is trained, so every
document vector is fixed and each query's negatives are *all* the train pairs' code vectors, not
a batch's.  The starting weights are the INT8 ONNX file's own, dequantised (``(q - zero) * scale``
per output column) into a 12-layer BERT written here in torch; its vectors match onnxruntime's to
a cosine of about 0.99 (the report gives the figure).

Runs in a training environment of its own, never the product's (``make code-encoder`` makes it:
torch 2.13.0 CPU, onnx, tokenizers), on what :mod:`benchmarks.code_adapter` left in its cache:
the train / validation queries with their code vectors, and CoSQA's dev queries with its 6,267
function vectors (the dev half chooses; nothing is trained on it)::

    python -m benchmarks.code_encoder --cache /tmp/code-adapter-fresh --key aba914f29f64a72c-generated-3000 \\
        --out benchmarks/reports/code-encoder

Writes ``OUT.json`` and ``OUT.md``: per variant, the seconds of training on this CPU (its flags in
the report), validation and CoSQA dev dense figures (MRR@10, Pass@5, Pass@20) after each epoch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.code_adapter import figures, ranks_of
from benchmarks.working_copy import cpu_flags

#: bge-small-en-v1.5's shape (its config.json): 12 layers, 12 heads of 32, width 384, LayerNorm eps 1e-12.
LAYERS, HEADS, WIDTH, EPS = 12, 12, 384, 1e-12
#: bge-small-en-v1.5's query instruction (its model card; situate's registry has the same).
QUERY_PREFIX = "Represent this sentence for searching relevant passages: "
#: Longest training document in WordPiece tokens (the product embeds up to 512; CoSQA's functions
#: average 92): a cap that keeps a batch's padding, and so a step's seconds, bounded on 2 cores.
DOC_TOKENS = 256


def dequantised(onnx_path: str) -> dict[str, np.ndarray]:
    """Every weight of the INT8 ONNX bge-small as float32, keyed by its Hugging Face name
    (matrices as ``[in, out]``).

    Raises
    ------
    KeyError
        The graph is not the expected BERT export (a weight or node is missing).
    """
    import onnx
    from onnx import numpy_helper

    g = onnx.load(onnx_path).graph
    init = {i.name: numpy_helper.to_array(i) for i in g.initializer}

    def deq(base: str) -> np.ndarray:
        q = init[base + "_quantized"].astype(np.float32)
        return ((q - init[base + "_zero_point"].astype(np.float32)) * init[base + "_scale"]).astype(np.float32)

    out = {k: v.astype(np.float32) for k, v in init.items() if v.dtype == np.float32 and "." in k}
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        out[f"embeddings.{name}.weight"] = deq(f"embeddings.{name}.weight")
    for node in g.node:
        if node.op_type == "MatMulInteger" and node.name.startswith("/encoder/layer."):
            key = node.name.removeprefix("/").removesuffix("/MatMul_quant").replace("/", ".")
            out[key + ".weight"] = deq(node.input[1].removesuffix("_quantized"))
    return out


def build(weights: dict[str, np.ndarray]):
    """A torch BERT (CLS vector, L2-normalised) holding ``weights`` as trainable parameters."""
    import torch
    from torch import nn

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.p = nn.ParameterDict({k.replace(".", "__"): nn.Parameter(torch.tensor(v)) for k, v in weights.items()})

        def w(self, name):
            return self.p[name.replace(".", "__")]

        def ln(self, x, name):
            return nn.functional.layer_norm(x, (WIDTH,), self.w(name + ".weight"), self.w(name + ".bias"), EPS)

        def lin(self, x, name):
            return x @ self.w(name + ".weight") + self.w(name + ".bias")

        def forward(self, ids, mask):
            n, t = ids.shape
            x = self.w("embeddings.word_embeddings.weight")[ids] + self.w("embeddings.position_embeddings.weight")[:t]
            x = self.ln(x + self.w("embeddings.token_type_embeddings.weight")[0], "embeddings.LayerNorm")
            bias = (1.0 - mask[:, None, None, :].float()) * -1e4
            for i in range(LAYERS):
                pre = f"encoder.layer.{i}."
                q, k, v = (
                    self.lin(x, pre + "attention.self." + s).view(n, t, HEADS, -1).transpose(1, 2)
                    for s in ("query", "key", "value")
                )
                a = torch.softmax(q @ k.transpose(-1, -2) / (WIDTH // HEADS) ** 0.5 + bias, dim=-1) @ v
                a = a.transpose(1, 2).reshape(n, t, WIDTH)
                x = self.ln(x + self.lin(a, pre + "attention.output.dense"), pre + "attention.output.LayerNorm")
                h = nn.functional.gelu(self.lin(x, pre + "intermediate.dense"))
                x = self.ln(x + self.lin(h, pre + "output.dense"), pre + "output.LayerNorm")
            return nn.functional.normalize(x[:, 0], dim=-1)

    return Bert()


def batches(tok, texts: list[str], size: int, prefix: str = QUERY_PREFIX, max_tokens: int = 512):
    """``(ids, mask)`` int64 tensors for ``texts`` (each with ``prefix``, cut to ``max_tokens``
    WordPiece tokens, [SEP] kept last) ``size`` at a time, padded to each batch's longest."""
    import torch

    for s in range(0, len(texts), size):
        ids = [
            e.ids if len(e.ids) <= max_tokens else e.ids[: max_tokens - 1] + e.ids[-1:]
            for e in tok.encode_batch([prefix + t for t in texts[s : s + size]])
        ]
        t = max(len(x) for x in ids)
        yield (
            torch.tensor([x + [0] * (t - len(x)) for x in ids]),
            torch.tensor([[1] * len(x) + [0] * (t - len(x)) for x in ids]),
        )


def encode(model, tok, texts: list[str], prefix: str = QUERY_PREFIX) -> np.ndarray:
    """float32[len(texts), 384]: ``model``'s vectors of ``texts`` (queries by default; documents,
    which bge-small gives no prefix, with ``prefix=""``), sorted by length into batches of 32."""
    import torch

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.zeros((len(texts), WIDTH), np.float32)
    with torch.no_grad():
        for s, (i, m) in zip(range(0, len(order), 32), batches(tok, [texts[j] for j in order], 32, prefix)):
            out[order[s : s + 32]] = model(i, m).numpy()
    return out


@dataclasses.dataclass(frozen=True)
class Variant:
    """One fine-tune: learning rate (AdamW), InfoNCE temperature, epochs, batch size, and how many
    of the top layers are trained (12: all, embeddings included)."""

    lr: float
    temperature: float = 0.02
    epochs: int = 3
    batch: int = 32
    top: int = 12
    documents: bool = False
    bank: bool = False

    @property
    def name(self) -> str:
        layers = "all layers" if self.top == LAYERS else f"top {self.top} layers"
        side = "query side"
        if self.documents:
            side = "both sides, " + ("other codes' fixed vectors as negatives" if self.bank else "in-batch negatives")
        return f"{side}, {layers}, lr={self.lr:g}, t={self.temperature:g}, batch {self.batch}, {self.epochs} epochs"


def trainable(model, top: int) -> list:
    """The parameters of the top ``top`` layers (all of them, embeddings included, for 12)."""
    keep = [f"encoder__layer__{i}__" for i in range(LAYERS - top, LAYERS)]
    params = []
    for k, p in model.p.items():
        p.requires_grad = top == LAYERS or any(k.startswith(s) for s in keep)
        if p.requires_grad:
            params.append(p)
    return params


def finetune(weights, tok, data: dict, variant: Variant, seed: int = 0) -> tuple[object, list[dict]]:
    """Train a copy of ``weights`` on ``data["train_text"]`` against the fixed code vectors
    ``data["train_d"]`` (each query's own is the positive, every other pair's a negative); after
    each epoch, the validation and CoSQA dev figures.  Returns the model and those rows."""
    import torch

    torch.manual_seed(seed)
    model = build(weights)
    opt = torch.optim.AdamW(trainable(model, variant.top), lr=variant.lr, weight_decay=0.0)
    docs = torch.tensor(data["train_d"])
    texts = list(data["train_text"])
    rng = np.random.default_rng(seed)
    rows, t0 = [], time.perf_counter()
    for epoch in range(1, variant.epochs + 1):
        order = rng.permutation(len(texts))
        model.train()
        for s in range(0, len(order) - variant.batch + 1, variant.batch):
            idx = order[s : s + variant.batch]
            ((ids, mask),) = batches(tok, [texts[i] for i in idx], variant.batch)
            labels = torch.tensor(data["train_label"][idx])
            if variant.documents:  # the batch's codes through the model (with a bank: other codes' fixed vectors)
                codes = [data["train_code"][j] for j in labels.tolist()]
                ((dids, dmask),) = batches(tok, codes, variant.batch, "", DOC_TOKENS)
                others = torch.ones(len(docs), dtype=torch.bool)
                others[labels] = False
                negatives = [model(dids, dmask)] + ([docs[others]] if variant.bank else [])
                logits = model(ids, mask) @ torch.cat(negatives).T / variant.temperature
                labels = torch.arange(len(idx))
            else:
                logits = model(ids, mask) @ docs.T / variant.temperature
            loss = torch.nn.functional.cross_entropy(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        seconds = round(time.perf_counter() - t0, 1)
        rows.append({"epoch": epoch, "train_seconds": seconds, **scored(model, tok, data, variant.documents)})
        print(json.dumps({"variant": variant.name, **rows[-1]}), flush=True)
    return model, rows


def scored(model, tok, data: dict, documents: bool = False) -> dict:
    """Dense figures of ``model``'s query vectors on the validation slice and CoSQA dev, against the
    fixed document vectors, or (``documents``) CoSQA's functions embedded again by ``model``."""
    val = encode(model, tok, list(data["val_text"]))
    cq = encode(model, tok, list(data["cosqa_text"]))
    out = {"validation": figures(ranks_of(val, data["val_d"], np.arange(len(val))))}
    cd = encode(model, tok, data["cosqa_content"], "") if documents else data["cosqa_d"]
    return out | {"cosqa_dev_dense": figures(ranks_of(cq, cd, data["cosqa_golden"]))}


def load_data(cache: Path, key: str, cosqa_queries: Path, extra: str = "") -> dict:
    """The cached vectors of :func:`benchmarks.code_adapter.embedded` (``KEY.npz``) with the query
    texts and pair hashes they were made from (``KEY.texts.json``, written beside them) and CoSQA's
    dev queries.  With ``extra`` (another cached key, e.g. the mined descriptions), its train pairs
    are added, each code once (by hash) and none of ``key``'s validation pairs.  ``train_label[i]``
    is the row of ``train_d`` that is query ``i``'s code."""
    data = dict(np.load(cache / f"{key}.npz"))
    texts = json.loads((cache / f"{key}.texts.json").read_text())
    data["train_text"], data["val_text"] = list(texts["train"]), texts["validation"]
    data["train_label"] = list(range(len(texts["train"])))
    if extra:
        held = set(texts["validation_hash"])
        rows = {h: i for i, h in enumerate(texts["train_hash"])}
        more = json.loads((cache.parent / f"{extra}.texts.json").read_text())
        more_d = np.load(cache.parent / f"{extra}.npz")["train_d"]
        docs = [data["train_d"]]
        for text, h, d in zip(more["train"], more["train_hash"], more_d):
            if h in held:
                continue
            if h not in rows:
                rows[h] = len(rows)
                docs.append(d[None])
            data["train_text"].append(text)
            data["train_label"].append(rows[h])
        data["train_d"] = np.concatenate(docs)
    data["train_label"] = np.array(data["train_label"])
    data["train_code"] = texts.get("train_code", [])
    data["cosqa_content"] = [e["content"] for e in json.loads(cosqa_queries.with_name("cosqa_chunks.json").read_text())]
    data["cosqa_text"] = [json.loads(line)["query"] for line in cosqa_queries.read_text().splitlines() if line.strip()]
    assert len(data["cosqa_text"]) == len(data["cosqa_q"])
    return data


#: The fine-tunes measured (docs/quality.md, "Code search: a query map learnt from installed code").
VARIANTS = [
    Variant(2e-5),
    Variant(2e-5, epochs=1),
    Variant(1e-5, epochs=1, documents=True, bank=True),
    Variant(1e-5, epochs=1, documents=True),
]


def markdown(report: dict) -> str:
    """The report as a Markdown table: one row per variant and epoch."""
    lines = [
        f"bge-small-en-v1.5 fine-tuned on the mined pairs (the variant says which side; the validation slice is scored "
        "against the shipped model's code vectors), dense ranking alone "
        f"({report['cpu']}); {report['train_pairs']:,} train pairs, {report['validation_pairs']:,} validation pairs; "
        "dequantised torch model against onnxruntime's INT8 vectors on CoSQA dev: mean cosine "
        f"{report['dequantised_cosine']}.",
        "",
        "| variant | epoch | train s | validation MRR@10 | validation Pass@5 "
        "| CoSQA dev MRR@10 | CoSQA dev Pass@5 | CoSQA dev Pass@20 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        m, c = row["validation"], row["cosqa_dev_dense"]
        lines.append(
            f"| {row['name']} | {row['epoch']} | {row['train_seconds']} | {m['mrr@10']:.4f} | {m['pass@5']:.1f} | "
            f"{c['mrr@10']:.4f} | {c['pass@5']:.1f} | {c['pass@20']:.1f} |"
        )
    if report.get("command"):
        lines += ["", f"Made by: `{report['command']}`"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import torch
    from tokenizers import Tokenizer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="path without extension")
    ap.add_argument("--cache", default="/tmp/code-adapter")
    ap.add_argument("--key", required=True, help="the cached embeddings' name (PAIRS-SHA16-generated-N)")
    ap.add_argument("--model", default=str(Path.home() / ".cache/situate/models/bge-small-en-v1.5"))
    ap.add_argument("--queries", default="eval/cosqa/queries_dev.jsonl")
    ap.add_argument("--variants", default="", help="indices into VARIANTS, comma-separated (default: all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--extra", default="", help="FOLDER/KEY beside --cache: its train pairs added")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model_dir = Path(args.model)
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=512)
    weights = dequantised(str(model_dir / "model.onnx"))
    data = load_data(Path(args.cache), args.key, Path(args.queries), args.extra)
    base = build(weights).eval()
    cq = encode(base, tok, data["cosqa_text"])
    rows = [{"name": "dequantised bge-small, not trained", "epoch": 0, "train_seconds": 0, **scored(base, tok, data)}]
    picks = [VARIANTS[int(i)] for i in args.variants.split(",")] if args.variants else VARIANTS
    for variant in picks:
        _, trained = finetune(weights, tok, data, variant)
        rows += [{"name": variant.name, **r} for r in trained]
    report = {
        "cpu": cpu_flags(),
        "key": args.key,
        "train_pairs": len(data["train_text"]),
        "validation_pairs": len(data["val_text"]),
        "command": " ".join(
            [".venv-train/bin/python -m benchmarks.code_encoder", *(argv if argv is not None else sys.argv[1:])]
        ),
        "dequantised_cosine": round(float((cq * data["cosqa_q"]).sum(axis=1).mean()), 4),
        "rows": rows,
    }
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
