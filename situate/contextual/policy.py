"""Which context a document's chunks get: the policy per kind of document.

Source code (:func:`situate.contextual.code_context.is_source`: a code file, or a corpus entry
that parses as code) gets ``SITUATE_CODE_CONTEXT``, every other document (prose: Markdown, RST,
HTML, PDF, text) ``SITUATE_CONTEXT``.  The defaults, ``structure`` for code and ``document`` for
prose, come from cross-validation on both labelled corpora's dev halves
(``benchmarks/context_policy.py``, report ``benchmarks/reports/context-policy.md``): on code the
LLM's summary moved neither Pass@5 nor Pass@20 beyond the fold spread (codebase dev: Pass@20
95.36 with and without it; over all 248 queries the same failure@20), so code gets its file and
enclosing definitions with no LLM call; on prose the summary's gain held on both halves (docs dev
Pass@20 90.67 → 92.67), so prose keeps it.  Either kind can still be sent to the model (``chunk``,
``document``) by its setting.

Examples
--------
>>> class LLM:
...     context, code_context = "document", "structure"
>>> context_for(LLM(), {"format": "code", "text": "def f(): pass"})
'structure'
>>> context_for(LLM(), {"format": "markdown", "text": "# Notes"})
'document'
>>> for_document(LLM(), {"format": "code", "text": "x = 1"}).context
'structure'
>>> uses_llm(LLM()), describe(LLM())
(True, 'code: structure, prose: document')
"""

from __future__ import annotations

from situate.contextual.code_context import is_source

#: The context modes that make no LLM call: ``structure`` (the structural context alone) and
#: ``extract`` (a prose document's lead sentences as its context: :mod:`situate.contextual.lead`).
NO_LLM_MODES = ("structure", "extract")

#: The kinds of document the policy tells apart, and the settings that choose their context.
KIND_SETTINGS = {"code": "SITUATE_CODE_CONTEXT", "prose": "SITUATE_CONTEXT"}


def kind_of(doc: dict) -> str:
    """``"code"`` or ``"prose"`` for a loaded document (``Document`` as JSON)."""
    return "code" if is_source(doc) else "prose"


def context_for(llm, doc: dict) -> str:
    """The context mode (``chunk``, ``document`` or ``structure``) of document ``doc``'s chunks
    under ``llm``'s settings (``llm.code_context`` for code, ``llm.context`` for prose)."""
    return llm.code_context if kind_of(doc) == "code" else llm.context


class _ModeView:
    """``llm`` as seen for one document: its ``context`` is that document's mode; every other
    attribute and method is the model's own (one loaded model, one cache, one lock)."""

    def __init__(self, llm, context: str):
        self._llm, self.context = llm, context

    def __getattr__(self, name: str):
        return getattr(self._llm, name)


def for_document(llm, doc: dict):
    """``llm`` with ``context`` set to document ``doc``'s mode (:func:`context_for`): what the
    fitting, prompting and blurb code read; ``llm`` itself where the mode is its own."""
    mode = context_for(llm, doc)
    return llm if mode == llm.context else _ModeView(llm, mode)


def with_mode(llm, mode: str):
    """``llm`` with ``context`` set to ``mode``."""
    return llm if mode == llm.context else _ModeView(llm, mode)


def uses_llm(llm) -> bool:
    """Whether any kind of document is sent to the model."""
    return llm.context not in NO_LLM_MODES or llm.code_context not in NO_LLM_MODES


def describe(llm) -> str:
    """The policy in one line for a run's metadata and the ingest summary."""
    return f"code: {llm.code_context}, prose: {llm.context}"
