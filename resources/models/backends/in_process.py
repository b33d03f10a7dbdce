"""The blurb model in this process: llama-cpp-python's ``Llama``, loaded once per process
(:meth:`situate.resources.models.llm.BlurbLLM.load`), one caller at a time in its context."""

from __future__ import annotations

import os
import time

from situate.resources.models.backends.base import LlmBackend, line_sequence
from situate.resources.models.llm import _CACHE, CALLS, Generation, LlmTokenizer, _grammar, model_lock
from situate.resources.models.threads import fit_threads


class InProcessBackend(LlmBackend):
    """llama-cpp-python in this process: greedy decoding on the shared ``Llama``, whose KV cache
    serves a prompt's prefix that is token-identical to the previous prompt's (counted by
    llama.cpp's ``llama_perf_context``), and the shared-prefix batcher (``SITUATE_BATCH``).

    Parameters
    ----------
    settings : situate.resources.models.llm.BlurbLLM
        ``model_path`` (a chat GGUF) and the llama.cpp settings.
    """

    remote = False

    def model_id(self) -> str:
        """``model_id``, or the GGUF file name without ``.gguf``."""
        s = self.settings
        return s.model_id or os.path.basename(s.model_path).removesuffix(".gguf")

    def identity(self) -> str:
        """sha256 hex of the GGUF file.

        Raises
        ------
        OSError
            ``model_path`` cannot be read.
        """
        from situate.resources.store.cache import file_sha256

        return file_sha256(self.settings.model_path)

    def kind(self) -> str:
        """``in-process``."""
        return "in-process"

    def describe(self) -> str:
        """``in-process``."""
        return "in-process"

    def reuse(self) -> str:
        """``measured``: llama.cpp counts the prompt tokens it evaluated (``n_p_eval``)."""
        return "measured"

    def tokenizer(self) -> LlmTokenizer:
        """The GGUF's own tokenizer (vocabulary only, no weights).

        Raises
        ------
        situate.resources.models.registry.ModelFileError
            As :meth:`situate.resources.models.llm.BlurbLLM.load`.
        """
        return LlmTokenizer(self.settings.load(vocab_only=True), defuse=False)

    def generate(
        self, tokens: list[int], stop: list[str] | None = None, max_tokens: int | None = None, grammar: str = ""
    ) -> Generation:
        """Greedy completion on the shared ``Llama``, its lock held (threads of a service, MCP).

        Raises
        ------
        situate.resources.models.registry.ModelFileError
            As :meth:`situate.resources.models.llm.BlurbLLM.load`.
        """
        llm = self.settings.load()
        with model_lock(llm):  # one caller at a time in a llama.cpp context (threads of a service, MCP)
            return self._generate(llm, tokens, stop, max_tokens, grammar)

    def _generate(
        self, llm, tokens: list[int], stop: list[str] | None, max_tokens: int | None, grammar: str
    ) -> Generation:
        """:meth:`generate` on the loaded ``llm``, its lock held."""
        import llama_cpp

        s = self.settings
        fit_threads(llm, s.n_threads)
        CALLS["llm_generate"] += 1
        perf = getattr(llama_cpp, "llama_perf_context", None)
        p0 = perf(llm.ctx) if perf else None
        before = p0.n_p_eval if perf else 0
        t0 = time.perf_counter()
        out = llm.create_completion(
            prompt=tokens,
            max_tokens=max_tokens or s.max_tokens,
            temperature=0.0,
            top_k=1,
            repeat_penalty=s.repeat_penalty,
            stop=stop or [],
            seed=s.seed,
            grammar=_grammar(grammar) if grammar else None,
        )
        seconds = time.perf_counter() - t0
        p1 = perf(llm.ctx) if perf else None
        evaluated = p1.n_p_eval - before if perf else len(tokens)
        usage = out.get("usage", {})
        return Generation(
            out["choices"][0]["text"],
            len(tokens),
            evaluated,
            len(tokens) - evaluated,
            int(usage.get("completion_tokens", 0)),
            seconds,
            (p1.t_p_eval_ms - p0.t_p_eval_ms) / 1000 if perf else 0.0,
            (p1.t_eval_ms - p0.t_eval_ms) / 1000 if perf else 0.0,
        )

    def generate_lines(
        self,
        tokens: list[int],
        starts: list[str],
        stop: list[str] | None = None,
        max_tokens: int | None = None,
        grammar: str = "",
    ) -> Generation:
        """The lines continue one KV cache (:func:`~situate.resources.models.backends.base.line_sequence`),
        the model's lock held throughout, so no other caller comes in between.

        Raises
        ------
        situate.resources.models.registry.ModelFileError
            As :meth:`situate.resources.models.llm.BlurbLLM.load`.
        """
        llm = self.settings.load()
        with model_lock(llm):  # the lines continue one KV cache: no other caller in between
            return line_sequence(self, llm, tokens, starts, stop, max_tokens, grammar, served=False)

    def batcher(self, stop: list[str] | None = None, max_tokens: int | None = None):
        """The process-wide :class:`situate.resources.models.batching.SharedPrefixBatcher` for these
        settings (``batch`` sequences, each with ``n_ctx`` tokens), sharing the loaded weights;
        ``max_tokens`` bounds each generation (default the settings' ``max_tokens``).

        Raises
        ------
        situate.resources.models.registry.ModelFileError
            As :meth:`situate.resources.models.llm.BlurbLLM.load`.
        """
        from situate.resources.models.batching import SharedPrefixBatcher

        s = self.settings
        bound = max_tokens or s.max_tokens
        key = s._key(False) + ("batcher", s.batch, bound, s.repeat_penalty, tuple(stop or []))
        batcher = _CACHE.get(key)
        if batcher is None:
            batcher = SharedPrefixBatcher(
                s.load(),
                n_seq=s.batch,
                n_ctx=s.n_ctx,
                n_batch=s.n_batch,
                max_tokens=bound,
                repeat_penalty=s.repeat_penalty,
                stop=stop,
            )
            _CACHE[key] = batcher
        return batcher
