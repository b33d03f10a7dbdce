"""A GGUF embedder read token by token (pooling off), for late chunking
(:mod:`situate.contextual.late_chunking`).

llama.cpp returns one vector per input token when a context is made with
``pooling_type = LLAMA_POOLING_TYPE_NONE``; this wraps ``Llama.embed`` on such a context and the
model's own tokenizer.  A BERT-style GGUF (nomic-embed-text-v1.5) adds its classifier and
separator tokens (``[CLS]`` 101, ``[SEP]`` 102 in its WordPiece vocabulary) when a text is
tokenized with ``add_bos=True``.
"""

from __future__ import annotations

import os

import numpy as np


class TokenEmbedder:
    """Per-token vectors of a GGUF embedder.

    Parameters
    ----------
    model_path : str
        The embedding GGUF (nomic-embed-text-v1.5: ``situate models install
        nomic-embed-text-v1.5``).
    n_ctx : int
        Most tokens read at once, special tokens included (nomic-embed-text-v1.5: 2,048, its
        training length).
    n_threads : int
        CPU threads (0: llama.cpp's default).

    Raises
    ------
    situate.resources.models.registry.ModelFileError
        The file is missing or fails its pinned size or sha256.
    """

    def __init__(self, model_path: str, n_ctx: int = 2048, n_threads: int = 0):
        import llama_cpp

        from situate.resources.models.registry import ModelFileError, check_model_file

        if not os.path.isfile(model_path):
            raise ModelFileError(
                f"embedder file {model_path} not found: run `situate models install nomic-embed-text-v1.5`"
            )
        check_model_file(model_path)
        self.n_ctx = int(n_ctx)
        self.llm = llama_cpp.Llama(
            model_path=model_path,
            embedding=True,
            n_ctx=self.n_ctx,
            n_batch=self.n_ctx,
            n_ubatch=self.n_ctx,
            pooling_type=llama_cpp.LLAMA_POOLING_TYPE_NONE,
            n_threads=n_threads or None,
            verbose=False,
        )
        ends = self.llm.tokenize(b"", add_bos=True, special=False)
        #: ids around every sequence: ``[CLS]`` before, ``[SEP]`` after
        self.bos, self.eos = ends[:1], ends[1:]
        self.tokens_read = 0

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text``, no special tokens."""
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    def token_vectors(self, ids: list[int]) -> np.ndarray:
        """``float32[len(ids), dim]``: the model's output for each token of one sequence (not
        normalised).

        Raises
        ------
        ValueError
            More than ``n_ctx`` ids.
        """
        if len(ids) > self.n_ctx:
            raise ValueError(f"{len(ids)} tokens for a {self.n_ctx}-token embedder context")
        # Llama.embed takes text; the ids are given back as text only through the model's own
        # tokenizer, so decode them with llama.cpp's batch API (what Llama.embed does inside)
        import llama_cpp

        llm = self.llm
        llm._batch.reset()
        llm._ctx.kv_cache_clear()
        llm._batch.add_sequence(list(ids), 0, True)
        llm._ctx.decode(llm._batch)
        ptr = llama_cpp.llama_get_embeddings(llm._ctx.ctx)
        dim = llm.n_embd()
        out = np.ctypeslib.as_array(ptr, shape=(len(ids) * dim,)).reshape(len(ids), dim).copy()
        llm._batch.reset()
        llm._ctx.kv_cache_clear()
        self.tokens_read += len(ids)
        return out

    def query_vector(self, text: str) -> np.ndarray:
        """``float32[dim]``, L2-normalised: the mean of every token's vector of ``text`` with its
        special tokens (the model's own mean pooling)."""
        v = self.token_vectors(self.bos + self.tokenize(text) + self.eos).mean(0)
        return v / max(float(np.linalg.norm(v)), 1e-12)
