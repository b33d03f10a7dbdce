"""A BERT-style text encoder run with onnxruntime: the ONNX embedders (the candidates measured against the default).

An ONNX embedder takes ``input_ids``, ``attention_mask`` and, if its graph has it,
``token_type_ids`` (``int64[batch, tokens]``), and returns the final hidden states
``float32[batch, tokens, width]`` as its first output; the vector of a text is the [CLS] state
(``pooling="cls"``, BGE's model card) or the mean over its non-padding tokens (``"mean"``),
L2-normalised.  The WordPiece tokenizer is the model's own ``tokenizer.json`` (the ``tokenizers``
package), which adds [CLS] and [SEP]; inputs are cut to ``max_tokens`` of those tokens.
"""

from __future__ import annotations

import functools
import os
import threading

import numpy as np
from tokenizers import Tokenizer

#: One caller at a time per loaded session (the service's threads, the MCP server): onnxruntime
#: sessions are thread-safe, but two callers would each ask for every core.
_LOCKS: dict[tuple, threading.Lock] = {}


def ort_session(model_path: str, n_threads: int):
    """An onnxruntime CPU ``InferenceSession`` with ``n_threads`` intra-op threads and one
    inter-op thread (shared by the ONNX embedders and :mod:`situate.resources.models.reranker`)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = n_threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])


@functools.lru_cache(maxsize=4)
def session(model_path: str, tokenizer_path: str, max_tokens: int, n_threads: int):
    """``(onnxruntime.InferenceSession, tokenizers.Tokenizer, input names)`` for an ONNX encoder,
    loaded once a process.  The tokenizer cuts at ``max_tokens`` (special tokens included) and
    does not pad (:func:`encode` pads each batch to its longest).

    Raises
    ------
    situate.resources.models.registry.ModelFileError
        The model or tokenizer file is missing or, for a pinned file, has the wrong size or sha256.
    """
    from situate.resources.models.registry import ModelFileError, check_model_file

    for p in (model_path, tokenizer_path):
        if not p or not os.path.isfile(p):
            raise ModelFileError(
                f"embedder file {p or '(tokenizer.json)'} not found: run `situate models install <embedder name>`"
            )
        check_model_file(p)
    sess = ort_session(model_path, n_threads)
    tok = Tokenizer.from_file(tokenizer_path)
    tok.no_padding()
    tok.enable_truncation(max_length=max_tokens)
    names = {i.name for i in sess.get_inputs()}
    return sess, tok, names


def pool(hidden: np.ndarray, mask: np.ndarray, pooling: str) -> np.ndarray:
    """One L2-normalised vector per text from ``float32[batch, tokens, width]`` hidden states.

    Parameters
    ----------
    hidden : float32[batch, tokens, width]
    mask : int[batch, tokens]
        1 for a real token, 0 for padding.
    pooling : {"cls", "mean"}

    Returns
    -------
    float32[batch, width]

    Raises
    ------
    ValueError
        An unknown ``pooling``.

    Examples
    --------
    >>> h = np.array([[[3., 4.], [0., 1.], [9., 9.]]], dtype=np.float32)
    >>> pool(h, np.array([[1, 1, 0]]), "cls").round(2).tolist()
    [[0.6, 0.8]]
    >>> pool(h, np.array([[1, 1, 0]]), "mean").round(3).tolist()
    [[0.514, 0.857]]
    """
    if pooling == "cls":
        vecs = hidden[:, 0, :]
    elif pooling == "mean":
        m = mask[:, :, None].astype(np.float32)
        vecs = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)
    else:
        raise ValueError(f"unknown pooling {pooling!r}: cls or mean")
    vecs = vecs.astype(np.float32)
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs / np.where(norms == 0, 1, norms)


def encode(
    model_path: str,
    tokenizer_path: str,
    texts: list[str],
    pooling: str,
    max_tokens: int,
    n_threads: int,
    batch_size: int = 1,
) -> tuple[np.ndarray, int]:
    """Embed ``texts`` with an ONNX encoder.

    Parameters
    ----------
    texts : list of str
        With their prefixes already applied.
    max_tokens : int
        Longest input in the model's WordPiece tokens, [CLS] and [SEP] included (BGE: 512).
    n_threads : int
        onnxruntime intra-op threads, fixed when the session is first made.
    batch_size : int
        Texts per inference call, padded to the batch's longest (texts sorted by length first).
        1 is what the product uses: a dynamic-INT8 model scales its activations over the whole
        batch, padding included, so a text's vector depends on its batch (cosine down to 0.989
        between one-a-call and batches of 8 on 40 codebase chunks), and batches of 8 were no
        faster on 2 cores (5.9 s against 5.2 s for the 40).

    Returns
    -------
    (vectors, n_cut)
        ``float32[len(texts), width]`` L2-normalised, and how many texts were cut to ``max_tokens``.

    Raises
    ------
    situate.resources.models.registry.ModelFileError
        As :func:`session`.
    """
    sess, tok, names = session(model_path, tokenizer_path, max_tokens, n_threads)
    lock = _LOCKS.setdefault((model_path, max_tokens, n_threads), threading.Lock())
    encs = tok.encode_batch(texts) if texts else []
    n_cut = sum(1 for e in encs if e.overflowing)
    order = sorted(range(len(encs)), key=lambda i: len(encs[i].ids))
    out: list[np.ndarray | None] = [None] * len(encs)
    with lock:
        for b in range(0, len(order), batch_size):
            idx = order[b : b + batch_size]
            width = max(len(encs[i].ids) for i in idx)
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for r, i in enumerate(idx):
                n = len(encs[i].ids)
                ids[r, :n] = encs[i].ids
                mask[r, :n] = 1
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in names:
                feed["token_type_ids"] = np.zeros_like(ids)
            hidden = sess.run(None, feed)[0]
            for r, v in zip(idx, pool(hidden, mask, pooling)):
                out[r] = v
    if not encs:
        return np.zeros((0, 0), dtype=np.float32), 0
    return np.stack(out).astype(np.float32), n_cut
