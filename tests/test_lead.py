"""The ``extract`` context's lead sentences (situate/contextual/lead.py) on real pages' shapes."""

from __future__ import annotations

import pytest

from situate.contextual.lead import MAX_LEAD_CHARS, MAX_OUTLINE_CHARS, lead_of, outline_of, summary_source


def test_the_lead_skips_what_is_not_running_text():
    text = (
        "---\ntitle: Keys\n---\n\n# Rotating keys\n\n[![CI](ci.svg)](ci)\n\n```bash\nvault rotate\n\n"
        "vault status\n```\n\n| a | b |\n|---|---|\n\n- a list item that is long enough to pass for text\n\n"
        "Keys are rotated every 90 days; the old key stays valid for a day so clients can switch.\n"
    )
    assert lead_of({"text": text, "title": "Rotating keys"}) == (
        "Keys are rotated every 90 days; the old key stays valid for a day so clients can switch."
    )


def test_a_long_lead_is_cut_at_a_sentence_and_a_page_without_one_has_none():
    sentence = "The service answers every request within the deadline the client sets for it. "
    lead = lead_of({"text": "Intro\n\n" + sentence * 10})
    assert len(lead) <= MAX_LEAD_CHARS and lead.endswith("for it.") and lead.count("The service") == 4
    assert lead_of({"text": "# Title\n\nShort line\n\n## Another heading\n"}) == ""


def test_the_outline_names_the_title_and_each_section_once_within_its_bound():
    text = "# Keys\n\nIntro.\n\n## Rotate\n\nx\n\n### Grace period\n\ny\n\n#### Detail\n\nz\n\n## Revoke\n\n## Rotate\n"
    doc = {"title": "Keys", "text": text}  # no headings given: the Markdown ones are read
    assert outline_of(doc) == "Keys — Contents: Rotate; Grace period; Revoke"
    many = {"title": "T", "text": "", "headings": [[i, 1 + i % 3, f"Section number {i}"] for i in range(200)]}
    line = outline_of(many)
    assert len(line) <= MAX_OUTLINE_CHARS and "Section number 0;" in line
    assert "Section number 1;" not in line  # deeper levels are dropped first
    assert outline_of({"title": "", "text": "plain text, no heading"}) == ""


def test_the_summary_reads_the_outline_before_the_text_or_the_text_alone():
    doc = {"title": "Keys", "text": "# Keys\n\nIntro.\n\n## Rotate\n\nx\n"}
    assert summary_source(doc, "head") == doc["text"]
    assert summary_source(doc, "outline") == "Keys — Contents: Rotate\n\n" + doc["text"]
    with pytest.raises(ValueError, match="SITUATE_SUMMARY_READING='tail'"):
        summary_source(doc, "tail")
