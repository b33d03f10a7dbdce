"""Shared-prefix batching: several chunks of one document decoded at once over one prefix.

The sequential path (:meth:`situate.resources.models.llm.BlurbLLM.generate`) evaluates the document prefix once
and then, chunk after chunk, each chunk's suffix, generating one token per decode call.  Here the
prefix is evaluated once, in llama.cpp sequence 0, and copied to sequences 1..B-1 with
``llama_memory_seq_cp``; the B suffixes are evaluated in the same decode calls, and the B blurbs
are generated together, one decode per step for all of them.

Each sequence has its own KV stream (``kv_unified = False``): its cells sit exactly where the
sequential path puts them, so every sum in attention runs in the same order.  Measured with the
default model on 8 chunks (``benchmarks/batch_identity.py``), batches of 1, 2 and 3 gave the
sequential blurbs exactly, but a batch of 8 gave 5 of 8: something else in llama.cpp's decode of 8
sequences at once rounds differently, not found yet, so identity is only claimed up to 3.  With a unified cache
(cells shared by all sequences) the sequences' cells
interleave, float sums round differently, and 9 of 10 greedy blurbs of one measured document
changed.  The price is one copy of the prefix's KV per sequence (``n_seq`` x ``n_ctx`` cells).

Decoding is the sequential path's, step for step: the same sampler chain (llama.cpp's penalties
sampler over the last ``last_n_tokens_size`` generated tokens, then greedy), the same stop rules
(end-of-generation token, stop strings, ``max_tokens``, held stop checks inside a multi-byte
character) and the same detokenisation as ``Llama.create_completion``.  ``tests/test_batching.py``
checks the output token for token on real text.  That needs llama.cpp's CPU weight repacking off
(``BlurbLLM.repack``, off by default): with it on, llama.cpp repacks Qwen2.5-Coder-1.5B's Q4_K
weights for a kernel that multiplies four tokens at a time, so a token's logits depend on how many
tokens are evaluated with it, and the third and fourth of four test chunks got different greedy
blurbs, batched 3 + 1 and even 1 at a time.  With ``use_extra_bufts = False`` in the model
parameters (no repacking) all four were equal (docs/performance.md).
"""

from __future__ import annotations

import time

from situate.resources.models.llm import Generation
from situate.resources.models.registry import DEFAULT_REPEAT_PENALTY

# Bytes that start a 2-, 3- and 4-byte UTF-8 sequence: create_completion holds back stop-string
# checks while a character is incomplete (llama_cpp/llama.py, "Contains multi-byte UTF8").
_MULTIBYTE = [(2, 192), (3, 224), (4, 240)]


class SharedPrefixBatcher:
    """Generate blurbs for several chunks of one document in one batch over a shared prefix.

    Parameters
    ----------
    llm : llama_cpp.Llama
        The loaded blurb model (its weights are shared; this object makes its own context).
    n_seq : int
        Sequences decoded together (chunks per batch), >= 1.
    n_ctx : int
        KV cells per sequence, in LLM tokens (the sequential context's ``n_ctx``): each must hold
        the prefix, one suffix and ``max_tokens``.  The context holds ``n_seq * n_ctx`` cells
        (SmolLM2-135M, f16 cache: 30 layers x 2 x 3 KV heads x 64 x 2 bytes = 22.5 KiB a
        cell, so 8 x 8192 cells = 1.4 GiB).
    n_batch : int
        Tokens per ``llama_decode`` call while evaluating the prefix and the suffixes.
    max_tokens : int
        Bound on each blurb, in generated tokens (as ``BlurbLLM.max_tokens``).
    repeat_penalty : float
        As ``BlurbLLM.repeat_penalty``.
    stop : list of str
        Stop strings, as ``create_completion(stop=...)``.

    Raises
    ------
    RuntimeError
        llama.cpp could not create the context or a decode failed.
    """

    def __init__(
        self,
        llm,
        n_seq: int = 8,
        n_ctx: int = 16384,
        n_batch: int = 512,
        max_tokens: int = 80,
        repeat_penalty: float = DEFAULT_REPEAT_PENALTY,
        stop: list[str] | None = None,
    ):
        import llama_cpp
        from llama_cpp import _internals as internals

        if n_seq < 1:
            raise ValueError(f"n_seq must be >= 1, got {n_seq}")
        self.llm = llm
        self.n_seq = n_seq
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.max_tokens = max_tokens
        self.repeat_penalty = repeat_penalty
        self.stop = [s.encode("utf-8") for s in (stop or [])]
        params = llama_cpp.llama_context_params.from_buffer_copy(llm.context_params)
        params.n_ctx = n_ctx * n_seq  # llama.cpp gives each stream n_ctx / n_seq_max cells
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = n_seq
        params.kv_unified = False
        self._ctx = internals.LlamaContext(model=llm._model, params=params, verbose=False)
        self._mem = llama_cpp.llama_get_memory(self._ctx.ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._prefix: list[int] = []  # tokens held by sequence 0
        self.n_ctx_seq = llm.n_ctx()  # the sequential context: max_tokens is capped by it

    def close(self):
        import llama_cpp

        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        self._ctx.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # -- low level -------------------------------------------------------------------------
    def _decode(self, items: list[tuple[int, int, int, bool]], on_logits=None) -> None:
        """Decode ``(token, pos, seq, want_logits)`` items in slices of ``n_batch`` tokens, calling
        ``on_logits(item index, batch index)`` right after the slice holding each item that wants
        logits (llama.cpp keeps only the last decode's logits)."""
        import llama_cpp

        for start in range(0, len(items), self.n_batch):
            part = items[start : start + self.n_batch]
            b = self._batch
            b.n_tokens = len(part)
            wanted = []
            for i, (tok, pos, seq, logits) in enumerate(part):
                b.token[i] = tok
                b.pos[i] = pos
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = seq
                b.logits[i] = logits
                if logits:
                    wanted.append((start + i, i))
            rc = llama_cpp.llama_decode(self._ctx.ctx, b)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc} (KV cache of {self.n_ctx} cells a sequence full?)")
            if on_logits is not None:
                for item, i in wanted:
                    on_logits(item, i)

    def _set_prefix(self, prefix: list[int]) -> int:
        """Make sequence 0 hold exactly ``prefix``; returns prefix tokens evaluated (0 when the
        previous call's prefix is reused)."""
        import llama_cpp

        if not prefix:
            raise ValueError("empty prefix: the chat template's head at least is shared")
        common = 0
        for a, b in zip(self._prefix, prefix):
            if a != b:
                break
            common += 1
        if common == len(prefix) and common == len(self._prefix):
            return 0
        # Re-evaluate at least the last token (as llama-cpp-python does) so the cache is clean.
        common = min(common, len(prefix) - 1)
        llama_cpp.llama_memory_seq_rm(self._mem, 0, common, -1)
        rest = prefix[common:]
        self._decode([(t, common + j, 0, False) for j, t in enumerate(rest)])
        self._prefix = list(prefix)
        return len(rest)

    # -- public ----------------------------------------------------------------------------
    def generate(self, prefix: list[int], suffixes: list[list[int]]) -> list[Generation]:
        """Greedy blurbs for ``suffixes`` after a shared ``prefix``, ``n_seq`` at a time.

        Parameters
        ----------
        prefix : list of int
            LLM tokens shared by every prompt (chat-template head + document block).
        suffixes : list of list of int
            Each chunk's tokens after the prefix (chunk block + template tail), non-empty.

        Returns
        -------
        list of Generation
            One per suffix, in order.  ``evaluated`` counts the suffix tokens plus, for the first
            prompt, the prefix tokens evaluated; ``reused`` the rest of the prompt; ``seconds``
            the batch's wall time divided among its prompts.

        Raises
        ------
        ValueError
            ``prefix`` is empty, or a prompt and its blurb cannot fit a sequence's ``n_ctx``.
        RuntimeError
            A llama.cpp decode failed.
        """
        from situate.resources.models.llm import CALLS

        CALLS["llm_generate"] += len(suffixes)
        results: list[Generation] = []
        for start in range(0, len(suffixes), self.n_seq):
            results.extend(self._generate_group(prefix, suffixes[start : start + self.n_seq]))
        return results

    def _generate_group(self, prefix: list[int], suffixes: list[list[int]]) -> list[Generation]:
        import llama_cpp

        need = len(prefix) + max(len(s) for s in suffixes) + self.max_tokens
        if need > self.n_ctx:
            raise ValueError(f"{need} tokens needed, batched context holds {self.n_ctx}")
        t0 = time.perf_counter()
        prefix_evaluated = self._set_prefix(prefix)
        n_p = len(prefix)
        seqs = list(range(len(suffixes)))
        llama_cpp.llama_memory_seq_rm(self._mem, 0, n_p, -1)
        for s in seqs[1:]:
            llama_cpp.llama_memory_seq_rm(self._mem, s, -1, -1)
            llama_cpp.llama_memory_seq_cp(self._mem, 0, s, -1, -1)
        prompts = [prefix + suf for suf in suffixes]
        limits = [
            self.max_tokens if self.max_tokens + len(p) < self.n_ctx_seq else self.n_ctx_seq - len(p) for p in prompts
        ]
        group = _Sequences(self, prompts, limits, [self._sampler() for _ in seqs])
        # The suffixes, sequence after sequence, in n_batch slices (as llama-cpp-python's eval
        # slices a prompt); each sequence's first token is sampled as soon as its last prompt
        # token has logits.
        items, owner = [], {}
        for k, (s, suf) in enumerate(zip(seqs, suffixes)):
            owner[len(items) + len(suf) - 1] = k
            items.extend((t, n_p + j, s, j == len(suf) - 1) for j, t in enumerate(suf))
        self._decode(items, lambda item, i: group.take(owner[item], i))
        while group.step:
            current, group.step = list(group.step), []
            self._decode(
                [(tok, n_p + len(suffixes[k]) + len(group.completion[k]) - 1, seqs[k], True) for k, tok in current],
                lambda item, i: group.take(current[item][0], i),  # noqa: B023 (called within this step)
            )
        seconds = (time.perf_counter() - t0) / len(seqs)
        out = []
        for k, p in enumerate(prompts):
            evaluated = len(suffixes[k]) + (prefix_evaluated if k == 0 else 0)
            text = (group.texts[k] or b"").decode("utf-8", errors="ignore")
            out.append(Generation(text, len(p), evaluated, len(p) - evaluated, len(group.completion[k]), seconds))
        llama_cpp.llama_memory_seq_rm(self._mem, 0, n_p, -1)
        return out

    def _sampler(self):
        """One sequence's sampler: llama.cpp's repeat penalty over the last ``last_n_tokens_size``
        tokens, then greedy (what ``create_completion`` does at temperature 0)."""
        from llama_cpp import _internals as internals

        smp = internals.LlamaSampler()
        smp.add_penalties(
            n_vocab=self.llm._n_vocab,
            penalty_last_n=self.llm.last_n_tokens_size,
            penalty_repeat=self.repeat_penalty,
            penalty_freq=0.0,
            penalty_present=0.0,
        )
        smp.add_greedy()
        return smp


class _Sequences:
    """The sequences of one :meth:`SharedPrefixBatcher._generate_group` call as they are decoded:
    each one's completion tokens, its text once done (bytes), and the tokens to decode next."""

    def __init__(self, batcher: SharedPrefixBatcher, prompts: list[list[int]], limits: list[int], samplers: list):
        self.batcher, self.prompts, self.limits, self.samplers = batcher, prompts, limits, samplers
        self.completion: list[list[int]] = [[] for _ in prompts]
        self.texts: list[bytes | None] = [None] * len(prompts)
        self.multibyte = [0] * len(prompts)
        self.step: list[tuple[int, int]] = []  # (sequence index, token to decode next)

    def take(self, k: int, i: int) -> None:
        """Sample sequence ``k``'s next token from batch row ``i``; apply create_completion's
        stop rules; queue the token unless the sequence is done."""
        import llama_cpp

        b, llm = self.batcher, self.batcher.llm
        tok = self.samplers[k].sample(b._ctx, i)
        if llama_cpp.llama_vocab_is_eog(llm._model.vocab, tok):
            self.texts[k] = llm.detokenize(self.completion[k], prev_tokens=self.prompts[k])
            return
        self.completion[k].append(tok)
        all_text = llm.detokenize(self.completion[k], prev_tokens=self.prompts[k])
        for pos, char in enumerate(all_text[-3:]):
            rem = 3 - pos
            for num, pattern in _MULTIBYTE:
                if num > rem and pattern & char == pattern:
                    self.multibyte[k] = num - rem
        if self.multibyte[k] > 0:  # create_completion skips the stop and length checks
            self.multibyte[k] -= 1
            self.step.append((k, tok))
            return
        hits = [s for s in b.stop if s in all_text]
        if hits:
            self.texts[k] = all_text[: all_text.index(hits[0])]
            return
        if len(self.completion[k]) >= self.limits[k]:
            self.texts[k] = all_text
            return
        self.step.append((k, tok))
