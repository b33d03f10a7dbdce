"""The ``extract`` context's lead sentences (situate/contextual/lead.py) on real pages' shapes."""

from __future__ import annotations

from situate.contextual.lead import MAX_LEAD_CHARS, lead_of


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
