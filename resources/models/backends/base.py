"""The one interface of what runs the blurb model (:class:`LlmBackend`), and the line-by-line
generation the two llama.cpp tokenizer backends share (:func:`line_sequence`)."""

from __future__ import annotations

import abc

from situate.resources.models.llm import Generation


class LlmBackend(abc.ABC):
    """What runs the blurb model: llama-cpp-python in this process
    (:class:`~situate.resources.models.backends.in_process.InProcessBackend`), an OpenAI-compatible
    server (:class:`~situate.resources.models.backends.openai_compatible.ServerBackend`) or
    Anthropic's Messages API (:class:`~situate.resources.models.backends.anthropic_messages.AnthropicBackend`).

    One is chosen from the settings, once a process for each set of settings
    (:func:`situate.resources.models.backends.llm_backend`); :class:`~situate.resources.models.llm.BlurbLLM`
    hands it out and delegates to it.  A backend keeps no state of its own: the loaded model and
    the checked clients stay in the process-wide cache (``situate.resources.models.llm._CACHE``),
    reached through the settings' accessors (``load``, ``server``, ``api_client``), so
    :func:`~situate.resources.models.llm.forget_servers` still makes the next use check a server again.

    Parameters
    ----------
    settings : situate.resources.models.llm.BlurbLLM
        The resource whose fields say which model, where, and how to sample.

    Attributes
    ----------
    remote : bool
        Whether a server or an API runs the model (not this process).
    """

    remote: bool = False

    def __init__(self, settings):
        self.settings = settings

    @abc.abstractmethod
    def model_id(self) -> str:
        """Name of the model recorded in each row (``llm_model``)."""

    @abc.abstractmethod
    def identity(self) -> str:
        """sha256 hex (64 characters) of what writes the blurbs: the key of the blurb cache, kept
        blurbs and blurb files, so one backend's blurbs are never taken for another's."""

    @abc.abstractmethod
    def kind(self) -> str:
        """What runs the model, short, for each row (``llm_backend``); never a path, user or key of a URL."""

    @abc.abstractmethod
    def describe(self) -> str:
        """What runs the model, for a run's metadata (``backend``); never a path, user or key of a URL."""

    @abc.abstractmethod
    def reuse(self) -> str:
        """How the prompt tokens served from a cache (``Generation.reused``) are known:
        ``measured`` (llama.cpp's own counter, in process), ``reported``, ``reported where the
        server counts them`` or ``not reported`` (``Generation.reuse_reported`` is then False)."""

    @abc.abstractmethod
    def tokenizer(self):
        """The tokenizer prompts are built with: ``encode``, ``count``, ``encode_template``,
        ``pieces``, ``chat_template``, ``eos_text``
        (:class:`~situate.resources.models.llm.LlmTokenizer` or
        :class:`~situate.resources.models.anthropic_api.ChatTokenizer`)."""

    @abc.abstractmethod
    def generate(
        self, tokens: list[int], stop: list[str] | None = None, max_tokens: int | None = None, grammar: str = ""
    ) -> Generation:
        """Greedy completion of ``tokens`` (in :meth:`tokenizer`'s tokens), at most ``max_tokens``
        generated tokens (default the settings' ``max_tokens``), as
        :meth:`situate.resources.models.llm.BlurbLLM.generate`."""

    @abc.abstractmethod
    def generate_lines(
        self,
        tokens: list[int],
        starts: list[str],
        stop: list[str] | None = None,
        max_tokens: int | None = None,
        grammar: str = "",
    ) -> Generation:
        """One sequence of lines, as :meth:`situate.resources.models.llm.BlurbLLM.generate_lines`."""

    def batcher(self, stop: list[str] | None = None, max_tokens: int | None = None):
        """The shared-prefix batcher (``SITUATE_BATCH``); only the in-process model has one.

        Raises
        ------
        ValueError
            Here: a server or an API batches requests itself.
        """
        raise ValueError(
            "SITUATE_BATCH applies to the in-process model; a model server batches requests "
            "itself: leave SITUATE_BATCH at 1 with SITUATE_LLM_URL"
        )

    def batch_round(self):
        """A Message Batches round for one run, or None when ``api_batch`` is off; only Anthropic's
        API has one.

        Raises
        ------
        situate.resources.models.server.ServerError
            Here: ``api_batch`` is set (it needs ``api="anthropic"``).
        """
        if not self.settings.api_batch:
            return None
        from situate.resources.models.server import ServerError

        raise ServerError(
            "SITUATE_LLM_BATCH=1 sends the blurbs through Anthropic's Message Batches API: it "
            "needs SITUATE_LLM_API=anthropic"
        )


def line_sequence(
    backend: LlmBackend,
    llm,
    tokens: list[int],
    starts: list[str],
    stop: list[str] | None,
    max_tokens: int | None,
    grammar: str,
    served: bool,
) -> Generation:
    """:meth:`LlmBackend.generate_lines` with ``backend.generate`` for each line, ``llm``'s lock held.

    Parameters
    ----------
    llm : llama_cpp.Llama
        The loaded model (in process) or its vocabulary (``served``), whose tokenizer encodes
        each given start and each generated line.
    served : bool
        Each line is a request to a server, which reads the sequence again as text: a generated
        control-token spelling is broken (:func:`situate.resources.models.server.defuse_controls`),
        and ``prompt_tokens`` and ``reused`` are the requests' sums, as the server reported them.
        Otherwise the lines continue one KV cache: ``prompt_tokens`` is the last call's prompt and
        ``reused`` what of it was not evaluated.
    """
    stops = ["\n"] + [s for s in (stop or []) if s != "\n"]
    if served:
        from situate.resources.models.server import defuse_controls

    def enc(s: str) -> list[int]:
        # through a server the sequence goes back as text: a generated control-token
        # spelling must not become the real token there
        s = defuse_controls(s) if served and s else s
        return llm.tokenize(s.encode("utf-8"), add_bos=False, special=False) if s else []

    bound = max_tokens or backend.settings.max_tokens
    seq, text, total = list(tokens), "", None
    for n in range(len(starts) + 1):
        start = enc(starts[n - 1]) if n else []
        if len(seq) + len(start) + bound > backend.settings.n_ctx:
            break  # no room for this line: it and the rest are left to their own calls
        if n:
            text += starts[n - 1]
            seq += start
        g = backend.generate(seq, stop=stops, max_tokens=max_tokens, grammar=grammar)
        line = defuse_controls(g.text) if served else g.text
        text += line
        seq += enc(line)
        if total is None:
            total = g
        else:
            for f in ("evaluated", "generated", "seconds", "prefill_seconds", "generate_seconds") + (
                ("prompt_tokens", "reused") if served else ()
            ):
                setattr(total, f, getattr(total, f) + getattr(g, f))
            if not served:
                total.prompt_tokens = g.prompt_tokens
            total.reuse_reported = total.reuse_reported and g.reuse_reported
    if total is None:
        return Generation("", len(tokens), 0, 0, 0, 0.0)
    if not served:  # in process the lines continue one KV cache; a server's lines are requests
        total.reused = total.prompt_tokens - total.evaluated
    total.text = text
    return total
