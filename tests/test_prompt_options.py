"""The named prompt options with the real default model on real text (python-dotenv's main.py):
the grammar holds the output to one or two sentences without tags, the primed answer starts the
blurb, the code-aware system line reaches source files only, and every option keeps the published
prompt verbatim in the user turn."""

from __future__ import annotations

import re

import pytest
from conftest import needs_models
from test_batching import _real_document


def test_every_option_keeps_the_published_prompt_verbatim():
    from situate.contextual.prompts import ANTHROPIC_2024, PROMPTS

    for name, p in PROMPTS.items():
        if name == "questions":  # doc2query, not a situating context: the document tags only
            assert (p.document_head, p.document_tail) == (ANTHROPIC_2024.document_head, ANTHROPIC_2024.document_tail)
            assert "questions" in p.instruction and p.answer_prefix == "1."
            continue
        if p.by_reference:  # the document tags, the chunk sentence and the instruction, verbatim
            assert (p.document_head, p.document_tail) == (ANTHROPIC_2024.document_head, ANTHROPIC_2024.document_tail)
            assert p.chunk_head.startswith("Here is the chunk we want to situate within the whole document")
            assert ANTHROPIC_2024.chunk_tail.split("</chunk>\n", 1)[1] in p.instruction
            continue
        assert (p.document_head, p.document_tail, p.chunk_head, p.chunk_tail) == (
            ANTHROPIC_2024.document_head,
            ANTHROPIC_2024.document_tail,
            ANTHROPIC_2024.chunk_head,
            ANTHROPIC_2024.chunk_tail,
        ), name


def test_a_system_line_goes_before_the_user_turn():
    from situate.contextual.contextualize import chat_frame

    chatml = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    f = chat_frame(chatml, system="Say where the chunk sits.")
    assert f.head == "<|im_start|>system\nSay where the chunk sits.<|im_end|>\n<|im_start|>user\n"
    assert f.tail == "<|im_end|>\n<|im_start|>assistant\n"
    assert chat_frame(chatml).head == "<|im_start|>user\n"


@needs_models
@pytest.mark.models
def test_options_with_the_real_default_model():
    from situate.contextual.cleaning import clean_blurb
    from situate.contextual.document_blurbs import STOP
    from situate.contextual.fitting import prompt_builder
    from situate.contextual.prompts import PROMPTS, SITUATING_SYSTEM, SITUATING_SYSTEM_CODE
    from situate.pipelines.settings import resources_from_env

    llm = resources_from_env(plain=True)["llm"].model_copy(update={"n_ctx": 2048, "max_tokens": 60})
    text, chunks = _real_document()
    text, chunks = text[:2400], chunks[:2]

    # the code-aware system line reaches source files only; the general one every document
    code = PROMPTS["anthropic-2024+code-system"]
    assert SITUATING_SYSTEM_CODE in prompt_builder(llm, code, source=True).frame.head
    assert SITUATING_SYSTEM_CODE not in prompt_builder(llm, code, source=False).frame.head
    assert SITUATING_SYSTEM in prompt_builder(llm, PROMPTS["anthropic-2024+system"]).frame.head

    # the grammar: one or two sentences, no tag, no line break, whatever the model would write
    g = PROMPTS["anthropic-2024+grammar"]
    b = prompt_builder(llm, g, source=True)
    llm.load().reset()
    for c in chunks:
        out = llm.generate(b.prefix(text) + b.suffix(c), stop=STOP, grammar=g.grammar).text
        assert out and "<" not in out and "\n" not in out, out
        if out[-1] in ".!?":  # finished within max_tokens: at most two sentence ends
            assert len(re.findall(r"[.!?](?= |$)", out)) <= 2, out

    # the primed answer: the blurb starts with the prefix and is usable after cleaning
    p = PROMPTS["anthropic-2024-primed-about"]
    b = prompt_builder(llm, p, source=True)
    gen = llm.generate(b.prefix(text) + b.suffix(chunks[0]), stop=STOP)
    blurb = clean_blurb(p.answer_prefix + gen.text, chunks[0], document=text)
    assert blurb.usable and blurb.text.startswith("This chunk is about "), gen.text
