"""Issue 23's pure logic with FAKE tokenizers and FAKE generators: chunks by reference (marks,
exact fitting, the marks never in a blurb), the no-model tests, kept blurbs across an edit, the
document mode's records and blurb files.  The real model runs in tests/test_cost_e2e.py."""

import gzip
import json
import zlib

from situate.contextual.contextualize import ChatFrame, PromptBuilder, contextualize
from situate.contextual.fitting import fit_document
from situate.contextual.prompts import BY_REFERENCE, chunk_mark, first_line
from situate.resources.models.llm import Generation

FRAME = ChatFrame("<|user|>\n", "<|end|>\n<|assistant|>\n", True)


def doc_and_spans(n_paras=12, word="wörd"):
    paras = [f"Section {p}: " + " ".join(f"{word}{p}-{w}" for w in range(20)) for p in range(n_paras)]
    text = "\n\n".join(paras)
    spans, pos = [], 0
    for p in paras:
        spans.append((pos, pos + len(p)))
        pos += len(p) + 2
    return text, spans


def decoded(tokens) -> str:
    return bytes(t for t in tokens if t < 256).decode()


class FakeGenerate:
    """FAKE ``generate``: answers with the section the prompt's last mark names (so a blurb given to
    the wrong chunk shows), after a mark of its own (which cleaning must remove); counts calls."""

    def __init__(self):
        self.prompts: list[str] = []

    def __call__(self, tokens):
        prompt = decoded(tokens)
        self.prompts.append(prompt)
        n = int(prompt.rsplit("[chunk ", 1)[1].split("]", 1)[0])
        return Generation(
            f" [chunk {n}] the part of Section {n - 1} listing its entries.", len(tokens), len(tokens), 0, 12, 0.0
        )


def test_by_reference_prompt_reads_each_chunk_once(fake_tokenizer):
    text, spans = doc_and_spans(3)
    b = PromptBuilder(fake_tokenizer, FRAME, BY_REFERENCE)
    prefix = decoded(b.window_prefix(text, spans, 0, len(text)))
    # each chunk starts after its own mark, on its own line; the document is otherwise verbatim
    assert prefix.count("[chunk ") == 3 + 2  # three marks, and the instruction names two examples
    for i, (a, _) in enumerate(spans):
        assert f"{chunk_mark(i)}\n{text[a : a + 12]}" in prefix
    assert (
        prefix.replace("[chunk 1]\n", "", 1)
        .replace("[chunk 2]\n", "", 1)
        .replace("[chunk 3]\n", "", 1)
        .startswith("<|user|>\n<document>\n" + text + "\n</document>\n")
    )
    suffix = decoded(b.suffix(text[slice(*spans[1])], 1))
    assert suffix.startswith(
        "Here is the chunk we want to situate within the whole document: the chunk "
        "marked [chunk 2], which begins\n<chunk>\nSection 1: wörd1-0"
    )
    assert suffix.endswith("<|end|>\n<|assistant|>\nThis chunk is about")
    # the chunk is quoted by its first line only, at most QUOTE_CHARS characters
    from situate.contextual.prompts import QUOTE_CHARS

    quote = suffix.split("<chunk>\n", 1)[1].split("\n</chunk>", 1)[0]
    assert len(quote) <= QUOTE_CHARS + 1 and text[slice(*spans[1])] not in suffix


def test_by_reference_fitting_counts_the_marks_exactly(fake_tokenizer):
    text, spans = doc_and_spans(12)
    b = PromptBuilder(fake_tokenizer, FRAME, BY_REFERENCE)
    n_ctx, max_tokens = 1400, 40
    p = fit_document(text, spans, b, n_ctx=n_ctx, max_tokens=max_tokens)
    assert len(p.windows) > 1
    assert sorted(i for w in p.windows for i in w.chunks) == list(range(12))
    for w in p.windows:
        prefix = b.window_prefix(text, spans, w.start, w.end)
        assert len(prefix) == len(b._head) + w.n_tokens
        for i in w.chunks:
            assert len(prefix) + len(b.suffix(text[slice(*spans[i])], i)) + max_tokens <= n_ctx
            assert chunk_mark(i) in decoded(prefix)  # the window carries the marks of its chunks
    # reading by reference leaves more of the context to the document than repeating the chunk
    classic = fit_document(text, spans, PromptBuilder(fake_tokenizer, FRAME), n_ctx=n_ctx, max_tokens=max_tokens)
    assert p.budget > classic.budget and len(p.windows) <= len(classic.windows)


def test_by_reference_blurbs_go_to_their_own_chunks_without_marks(fake_tokenizer):
    text, spans = doc_and_spans(5)
    b = PromptBuilder(fake_tokenizer, FRAME, BY_REFERENCE)
    p = fit_document(text, spans, b, n_ctx=4096, max_tokens=32)
    gen = FakeGenerate()
    recs = contextualize(text, [text[a:z] for a, z in spans], p, b, gen, spans=spans)
    assert len(gen.prompts) == 5
    for i, r in enumerate(recs):
        assert r.status == "model", r.problems
        assert f"Section {i} " in r.blurb and "[chunk" not in r.blurb
        assert "[chunk" in r.raw  # what the model wrote is kept as it was


def test_by_reference_needs_spans(fake_tokenizer):
    import pytest

    text, spans = doc_and_spans(2)
    b = PromptBuilder(fake_tokenizer, FRAME, BY_REFERENCE)
    p = fit_document(text, spans, b, n_ctx=4096, max_tokens=32)
    with pytest.raises(ValueError, match="spans"):
        contextualize(text, [text[a:z] for a, z in spans], p, b, FakeGenerate())


def test_first_line_is_bounded():
    assert first_line("\n\n  def f(x):\n    return x\n") == "def f(x):"
    long = "word " * 100
    q = first_line(long)
    assert q.endswith("…") and len(q) <= 161


def test_kept_chunks_are_not_prompted(fake_tokenizer):
    from situate.contextual.contextualize import BlurbRecord

    text, spans = doc_and_spans(4)
    b = PromptBuilder(fake_tokenizer, FRAME, BY_REFERENCE)
    p = fit_document(text, spans, b, n_ctx=4096, max_tokens=32)
    old = BlurbRecord("Kept.", "model", "Kept.", [], 0, 0, 0, 0, 0.0, 0, cached=True, kept=True)
    gen = FakeGenerate()
    recs = contextualize(text, [text[a:z] for a, z in spans], p, b, gen, spans=spans, kept={0: old, 2: old})
    assert len(gen.prompts) == 2 and [r.blurb == "Kept." for r in recs] == [True, False, True, False]


# -- no model call where it cannot help --------------------------------------------------------
def test_no_model_reasons_on_made_up_blobs_and_real_text():
    import base64
    import importlib.util
    from pathlib import Path

    from situate.contextual.skipping import chunk_reasons, no_model_reason

    assert no_model_reason("[" * 5000) == "degenerate"
    assert no_model_reason("ab" * 3000) == "degenerate"
    assert no_model_reason(base64.b64encode(bytes(range(256)) * 8).decode()) == "encoded"
    minified = ",".join(f"f{i}=function(a,b){{return a.k{i}(b,{i * 7})||[b{i},a]}}" for i in range(40))
    assert no_model_reason("var " + minified + ";") == "minified"
    # a long string of test data on one line is not minified code
    assert (
        no_model_reason('data = "' + " ".join("01001101" for _ in range(10)).replace(" ", "") * 8 + '"') != "minified"
    )
    table = "\n".join(" ".join(str(1000 + 37 * i * j % 9973) for j in range(10)) for i in range(40))
    assert no_model_reason(table) == "numeric-table"
    code_with_numbers = "\n".join(f"    assert f({i}) == {i * i}  # square" for i in range(40))
    assert no_model_reason(code_with_numbers) is None
    assert chunk_reasons("web/yarn.lock", ["anything", "else"]) == ["lock-file", "lock-file"]
    # real prose and code are never skipped: the installed dependencies' own files
    real = Path(importlib.util.find_spec("dagster").origin).read_text()[:3000]
    readme = (Path(importlib.util.find_spec("numpy").origin).parent / "ma" / "README.rst").read_text()[:3000]
    assert no_model_reason(real) is None and no_model_reason(readme) is None
    assert no_model_reason("[" * 150) is None  # short text: too little to judge


def test_no_chunk_of_either_labelled_corpus_is_skipped():
    """The labelled corpora are real code and prose: the tests flag none of their 969 chunks (so
    Pass@k cannot move), and their most repetitive chunk compresses twice above the threshold."""
    import json as _json

    from conftest import SHARED_EVAL

    from situate.contextual.skipping import MIN_COMPRESSION, no_model_reason

    chunks = [
        c["content"]
        for name in ("codebase/codebase_chunks.json", "docs/docs_chunks.json")
        for d in _json.loads((SHARED_EVAL.parent / name).read_text())
        for c in d["chunks"]
    ]
    assert len(chunks) == 969
    assert [t[:60] for t in chunks if no_model_reason(t)] == []
    ratios = [len(zlib.compress(t.encode())) / len(t.encode()) for t in chunks if len(t) >= 200]
    assert min(ratios) > 1.9 * MIN_COMPRESSION


# -- edits -------------------------------------------------------------------------------------
def test_edit_keeps_unchanged_blurbs_within_the_bound():
    from situate.contextual.edits import MAX_CHANGED_SHARE, kept_blurbs

    prev = {
        "doc_sha256": "v1",
        "settings": "s",
        "blurbs": [
            {"text_sha256": h, "blurb": h.upper(), "raw": h, "status": "model", "doc_sha256": "v1"}
            for h in "abcdefghij"
        ],
    }
    chunks = [{"text_sha256": h, "n_tokens": 100} for h in "abcdXfghij"]  # one chunk of ten changed
    kept, info = kept_blurbs(prev, chunks, "v2", "s")
    assert sorted(kept) == [0, 1, 2, 3, 5, 6, 7, 8, 9] and info["changed_share"] == 0.1
    assert kept[5]["blurb"] == "F" and kept[5]["doc_sha256"] == "v1"
    # a larger change re-situates every chunk
    many = [{"text_sha256": h, "n_tokens": 100} for h in "abXYZfghij"]
    assert 0.3 > MAX_CHANGED_SHARE and kept_blurbs(prev, many, "v2", "s") == (
        {},
        {"changed_share": 0.3, "changed_chunks": 3, "why": "changed more than the bound", "drifted": 0, "versions": {}},
    )
    # other settings (model, prompt, mode) never keep
    assert kept_blurbs(prev, chunks, "v2", "other")[0] == {}
    assert kept_blurbs(None, chunks, "v2", "s")[1]["why"] == "first version"
    # a repeated text is matched in order, once each
    dup = {
        "doc_sha256": "v1",
        "settings": "s",
        "blurbs": [
            {"text_sha256": "a", "blurb": "1", "raw": "1", "status": "model"},
            {"text_sha256": "a", "blurb": "2", "raw": "2", "status": "model"},
        ],
    }
    k, _ = kept_blurbs(
        dup, [{"text_sha256": "a", "n_tokens": 50}] * 3 + [{"text_sha256": "z", "n_tokens": 10}], "v2", "s", bound=0.5
    )
    assert [k[i]["blurb"] for i in sorted(k)] == ["1", "2"] and 2 not in k
    # only what a model wrote is kept: a fallback or a skip was a setting's or a check's doing
    made = {
        "doc_sha256": "v1",
        "settings": "s",
        "blurbs": [
            {"text_sha256": "a", "blurb": "", "raw": "", "status": "fallback:n_ctx"},
            {"text_sha256": "b", "blurb": "", "raw": "", "status": "skipped:large-document"},
            {"text_sha256": "c", "blurb": "", "raw": "It", "status": "fallback:too-short"},
            {"text_sha256": "d", "blurb": "D.", "raw": "D.", "status": "model"},
        ],
    }
    k, info = kept_blurbs(made, [{"text_sha256": h, "n_tokens": 10} for h in "abcd"], "v1", "s")
    assert sorted(k) == [3] and info["why"] == "unchanged" and info["changed_chunks"] == 3


# -- document mode -----------------------------------------------------------------------------
def test_document_mode_makes_one_call_for_the_whole_document(fake_tokenizer):
    from situate.contextual.document_blurbs import blurb_summary, document_records
    from situate.contextual.fitting import fit_document as fit
    from situate.contextual.prompts import DOCUMENT_SUMMARY

    text, spans = doc_and_spans(6)
    b = PromptBuilder(fake_tokenizer, FRAME, DOCUMENT_SUMMARY)
    plan = fit(text, [(0, 0)], b, 4096, 32)
    calls = []

    def gen(tokens):
        calls.append(tokens)
        return Generation("A list of wörd entries in six sections.", len(tokens), len(tokens), 0, 9, 0.5)

    recs = document_records(text, 6, plan, b, gen, [None, None, "minified", None, None, None], doc_sha256="v1")
    assert len(calls) == 1
    assert [r.status for r in recs] == ["model", "model", "skipped:minified", "model", "model", "model"]
    assert {r.blurb for r in recs if r.status == "model"} == {"A list of wörd entries in six sections."}
    assert all(r.mode == "document" for r in recs if r.status == "model")
    s = blurb_summary(recs)
    assert s["model_calls"] == 1 and s["skipped_reasons"] == {"minified": 1}
    assert document_records(text, 2, plan, b, gen, ["lock-file", "lock-file"])[0].status == "skipped:lock-file"
    assert len(calls) == 1


# -- blurb files -------------------------------------------------------------------------------
def test_blurb_file_round_trip_is_byte_stable(tmp_path):
    from situate.contextual import blurb_files

    t0, t1, t2, v1, v2, m = ("0" * 64, "1" * 64, "2" * 64, "a" * 64, "b" * 64, "c" * 64)
    stage = {
        "doc_sha256": v2,
        "blurbs": [
            {
                "chunk_id": "d:1:x",
                "text_sha256": t1,
                "doc_sha256": v1,
                "mode": "chunk:by-reference",
                "raw": "This chunk is about A.",
                "blurb": "This chunk is about A.",
                "status": "model",
            },
            {
                "chunk_id": "d:0:y",
                "text_sha256": t0,
                "doc_sha256": v2,
                "mode": "structure",
                "raw": "",
                "blurb": "",
                "status": "skipped:structure",
            },
            {
                "chunk_id": "d:2:z",
                "text_sha256": t2,
                "doc_sha256": v2,
                "mode": "chunk:by-reference",
                "raw": "",
                "blurb": "",
                "status": "fallback:n_ctx 32 leaves no room",
            },
        ],
    }
    lines = blurb_files.stage_lines(stage, "doc_1", m)
    # no model wrote the n_ctx fallback: not exported; the kept blurb goes under the stage's version
    assert [x["chunk_id"] for x in lines] == ["d:1:x", "d:0:y"] and {x["doc_sha256"] for x in lines} == {v2}
    a, b = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"
    assert blurb_files.write(a, lines) == 2 and blurb_files.write(b, list(reversed(lines))) == 2
    assert a.read_bytes() == b.read_bytes()
    got = blurb_files.read(a)
    assert got.get("chunk:by-reference", m, v2, t1) == "This chunk is about A."
    assert got.get("structure", "", v2, t0) == "" and got.rejected == 0 and got.lines == 2
    assert len(blurb_files.read(a, mode="document")) == 0 and len(blurb_files.read(a, model_sha256=m)) == 1
    first = json.loads(gzip.open(a, "rt").readline())
    assert first["chunk_id"] == "d:0:y" and set(first) == set(blurb_files.FIELDS)
    bad = tmp_path / "bad.jsonl.gz"
    with gzip.open(bad, "wt") as f:
        f.write('{"mode": "x"}\n')
    got = blurb_files.read(bad)
    assert got.rejected == 1 and got.rejections[0].startswith("line 1: missing field(s) chunk_id")


# -- a window's blurbs in one generation ----------------------------------------------------------
def test_window_lines_are_parsed_back_to_their_chunks():
    from situate.contextual.contextualize import parse_window_lines

    text = (
        "[chunk 3] This chunk is about C.\n[chunk 4]: This chunk is about D,\ncontinued here.\n"
        "[chunk 4] This chunk is about D again.\n[chunk 9] not asked for\n- [chunk 6] ok\n[chunk 7] two words\n"
        "[chunk 8] This chunk is about C!"
    )
    got = parse_window_lines(text, [2, 3, 4, 5, 6, 7])
    assert got == {
        2: ("This chunk is about C.", ""),
        3: ("", "repeated"),
        4: ("", "missing"),
        5: ("", "garbled"),
        6: ("two words", ""),
        7: ("", "repeated"),
    }


class FakeWindowGenerate:
    """FAKE one generation: a line per chunk asked for, in order, each naming its own section;
    ``garble`` maps a chunk index to what happens to its line (``drop``, ``twice``, ``empty``,
    ``invented``: a name absent from the document; ``nothing``: the answer prefix alone)."""

    def __init__(self, garble=None):
        self.garble = garble or {}
        self.calls = 0

    def __call__(self, tokens, starts, max_tokens):
        self.calls += 1
        prompt = decoded(tokens)
        asked = [
            int(n) - 1
            for n in prompt.rsplit("Here are the chunks", 1)[1]
            .split(". Answer")[0]
            .replace("[chunk ", "")
            .replace("]", "")
            .split(":")[1]
            .split(",")
        ]
        lines = []
        for i in asked:
            how = self.garble.get(i)
            line = f"[chunk {i + 1}] This chunk is about the entries of Section {i}."
            if how == "drop":
                continue
            if how == "empty":
                line = f"[chunk {i + 1}]"
            if how == "invented":
                line = f"[chunk {i + 1}] This chunk is about the FrobnicatorFactory class."
            if how == "nothing":  # the answer prefix and no more
                line = f"[chunk {i + 1}] This chunk is about"
            lines += [line, line] if how == "twice" else [line]
        text = "\n".join(lines)
        first = f"[chunk {asked[0] + 1}] This chunk is about"
        assert prompt.endswith(first)
        return Generation(
            text[len(first) :] if text.startswith(first) else "\n" + text,
            len(tokens),
            len(tokens),
            0,
            30 * len(asked),
            0.0,
        )


def test_one_generation_falls_back_per_chunk_with_nothing_lost_or_misassigned(fake_tokenizer):
    from situate.contextual.document_blurbs import blurb_summary
    from situate.contextual.prompts import BY_REFERENCE_WINDOW

    text, spans = doc_and_spans(6)
    chunks = [text[a:z] for a, z in spans]
    b = PromptBuilder(fake_tokenizer, FRAME, BY_REFERENCE_WINDOW)
    p = fit_document(text, spans, b, n_ctx=4096, max_tokens=32)
    window = FakeWindowGenerate({1: "drop", 2: "twice", 3: "empty", 4: "invented"})
    single = FakeGenerate()
    recs = contextualize(text, chunks, p, b, single, spans=spans, generate_window=window)
    assert window.calls == 1 and len(single.prompts) == 4
    # every chunk has a blurb naming its own section, none lost, none given to another chunk
    assert [f"Section {i} " in r.blurb or f"Section {i}." in r.blurb for i, r in enumerate(recs)] == [True] * 6
    tags = [[x for x in r.problems if x.startswith("one-generation")] for r in recs]
    assert tags == [
        ["one-generation"],
        ["one-generation-fallback:missing"],
        ["one-generation-fallback:repeated"],
        ["one-generation-fallback:garbled"],
        ["one-generation-fallback:ungrounded"],
        ["one-generation"],
    ]
    # the single calls reuse the window's prefix: the same tokens up to the chunk's own request
    prefix = decoded(b.window_prefix(text, spans, 0, len(text)))
    assert all(pr.startswith(prefix) for pr in single.prompts)
    s = blurb_summary(recs)
    assert s["model_calls"] == 5 and s["one_generation_lines"] == 2
    assert s["one_generation_fallbacks"] == {"missing": 1, "repeated": 1, "garbled": 1, "ungrounded": 1}


def test_the_examples_in_the_new_modules_hold():
    import doctest

    import situate.contextual.blurb_files
    import situate.contextual.contextualize
    import situate.contextual.edits
    import situate.contextual.skipping

    for m in (
        situate.contextual.skipping,
        situate.contextual.edits,
        situate.contextual.contextualize,
        situate.contextual.blurb_files,
    ):
        assert doctest.testmod(m).failed == 0, m.__name__


def test_the_default_mode_is_the_document_mode_for_prose_and_structure_for_code(monkeypatch):
    """Issue 23's choice for prose: ``document`` unless ``SITUATE_CONTEXT`` says otherwise; the
    per-kind policy's for source code: ``structure`` (no LLM call) unless ``SITUATE_CODE_CONTEXT``
    says otherwise; ``chunk`` (a blurb a chunk, today's prompt) stays one setting away."""
    from situate.contextual.policy import context_for, for_document
    from situate.contextual.prompts import DEFAULT_PROMPT
    from situate.pipelines.settings import resources_from_env
    from situate.resources.models.llm import BlurbLLM

    for name in ("SITUATE_CONTEXT", "SITUATE_CODE_CONTEXT", "SITUATE_PROMPT"):
        monkeypatch.delenv(name, raising=False)
    plain = BlurbLLM(model_path="unused.gguf")
    assert (plain.context, plain.code_context) == ("document", "structure")
    llm = resources_from_env(plain=True)["llm"]
    code = {"format": "code", "source": "a.py", "text": "def f():\n    return 1\n"}
    corpus_code = {"format": "corpus", "source": "c.json#1", "text": "def f(x):\n    return x + 1\n"}
    prose = {"format": "markdown", "source": "a.md", "text": "# Notes\n\nSome words."}
    assert [context_for(llm, d) for d in (code, corpus_code, prose)] == ["structure", "structure", "document"]
    view = for_document(llm, code)  # what fitting and prompting read: the mode, and the model's own settings
    assert (view.context, view.n_ctx, view.prompt) == ("structure", llm.n_ctx, llm.prompt)
    assert for_document(llm, prose) is llm
    monkeypatch.setenv("SITUATE_CODE_CONTEXT", "document")
    assert context_for(resources_from_env(plain=True)["llm"], code) == "document"
    monkeypatch.setenv("SITUATE_CONTEXT", "chunk")
    llm = resources_from_env(plain=True)["llm"]
    assert (llm.context, llm.prompt) == ("chunk", DEFAULT_PROMPT) == ("chunk", "anthropic-2024-primed-about")


def test_a_line_that_is_only_the_answer_prefix_falls_back(fake_tokenizer):
    """A one-generation line with nothing after "This chunk is about" (the codebase set's one
    generation wrote two) is no blurb: that chunk gets its own call, and keeps its own section."""
    from situate.contextual.prompts import BY_REFERENCE_WINDOW

    text, spans = doc_and_spans(4)
    chunks = [text[a:z] for a, z in spans]
    b = PromptBuilder(fake_tokenizer, FRAME, BY_REFERENCE_WINDOW)
    p = fit_document(text, spans, b, n_ctx=4096, max_tokens=32)
    single = FakeGenerate()
    recs = contextualize(
        text, chunks, p, b, single, spans=spans, generate_window=FakeWindowGenerate({0: "nothing", 2: "nothing"})
    )
    assert len(single.prompts) == 2
    assert [f"Section {i}" in r.blurb and r.status == "model" for i, r in enumerate(recs)] == [True] * 4
    tags = [[x for x in r.problems if x.startswith("one-generation")] for r in recs]
    # the second such line is also word for word the first: a loop
    assert tags == [
        ["one-generation-fallback:empty"],
        ["one-generation"],
        ["one-generation-fallback:repeated"],
        ["one-generation"],
    ]
