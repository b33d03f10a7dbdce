"""Where a chunk sits in its document and the lines a query matched (situate/contextual/snippets.py),
and how the CLI prints a hit (pipelines/output.py)."""

from __future__ import annotations

import doctest

from situate.contextual import snippets
from situate.contextual.snippets import MAX_LINE_CHARS, line_spans, matched_lines, query_terms


def test_the_examples_of_the_module_hold():
    assert doctest.testmod(snippets).failed == 0


def test_line_spans_agree_with_the_text_for_every_span():
    text = "# Título\n\nfirst line\n    indented ünïcode\n\nlast\n"
    spans = [(0, 9), (11, 21), (11, 43), (22, 43), (45, 50), (3, 3)]
    for (a, b), (first, last, start_byte, end_byte) in zip(spans, line_spans(text, spans), strict=True):
        assert first == text[:a].count("\n") + 1 and last == first + text[a:b].rstrip("\n").count("\n")
        assert text.encode()[start_byte:end_byte].decode() == text[a:b]


def test_identifiers_weigh_more_than_words_and_function_words_not_at_all():
    terms = query_terms("How does findDotenv use the load_env path?")
    assert terms["finddotenv"] == terms["load_env"] == 3.0 and terms["path"] == 1.0
    assert terms["find"] == terms["dotenv"] == terms["load"] == 1.0
    assert not {"how", "does", "use", "the"} & set(terms)


def test_the_window_holds_the_identifier_keeps_indentation_and_cuts_long_lines():
    body = [f"x{i} = {i}" for i in range(10)]
    chunk = "\n".join(["import os", "", *body, "def load_env(path):", "    return open(path)", "y" * 400])
    got = matched_lines(chunk, "where is load_env defined", first_line=100)
    assert got[0] == (112, "def load_env(path):") and got[1] == (113, "    return open(path)")
    assert got[2][1].endswith("…") and len(got[2][1]) == MAX_LINE_CHARS
    # nothing matches: the chunk's first lines
    assert matched_lines(chunk, "qwxzv blorptangle", 1, width=2) == [(1, "import os")]


def test_the_cli_shows_the_definitions_of_a_code_hit_and_the_path_of_a_prose_hit():
    from situate.pipelines.output import _inside

    code = "core.py\nCore classes of click: commands, groups and contexts.\nclass Group > def group\ndefines: inner"
    assert _inside(code, "src/click/core.py") == "class Group > def group; defines: inner"
    assert _inside("Guide > Install > From source", "docs/guide.md") == "Guide > Install > From source"
    assert _inside("", "a.txt") == ""
