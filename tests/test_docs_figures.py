"""The figures and names the docs state are the code's: the vector width, the asset checks, the
assets, the settings' defaults stated in prose (the settings table itself is generated and checked
by tests/test_settings_table.py), the schedule, the models' table.  A stale page fails here,
naming the page and what the code says instead."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _page(name: str) -> str:
    return (ROOT / name).read_text()


def _defaults() -> dict:
    from situate.resources.settings import DEFAULTS

    return DEFAULTS


def _embedder():
    from situate.resources.models.registry import DEFAULT_EMBED, EMBED_MODELS

    return EMBED_MODELS[DEFAULT_EMBED]


def _nightly() -> str:
    """The nightly schedule's time of day, ``HH:MM``, from its cron (``M H * * *``)."""
    from situate.pipelines.automation import NIGHTLY

    minute, hour, *rest = NIGHTLY.split()
    assert rest == ["*", "*", "*"], NIGHTLY
    return f"{int(hour):02d}:{int(minute):02d}"


def _max_concurrent_runs() -> str:
    from situate.pipelines.settings import DAGSTER_YAML

    return re.search(r"max_concurrent_runs: (\d+)", DAGSTER_YAML).group(1)


def _quote_chars() -> str:
    from situate.contextual.prompts import QUOTE_CHARS

    return str(QUOTE_CHARS)


def _candidates() -> str:
    from situate.resources.store.retrieval import CANDIDATES

    return str(CANDIDATES)


def _run_attempts() -> str:
    from situate.pipelines.automation import MAX_RUN_ATTEMPTS

    return str(MAX_RUN_ATTEMPTS)


def _code_fusion():
    from situate.resources.store.fusion import FUSION_BY_KIND

    return FUSION_BY_KIND["code"].describe()


#: (page, a pattern whose groups are the figure as the page writes it, the code's figure in the
#: same form).  Every match on the page must equal the code's, and the page must still state it.
FIGURES = [
    ("docs/data.md", r"vector float32\[(\d+)\]", lambda: str(_embedder().width)),
    ("docs/data.md", r"from ([\d,]+) rows the table", lambda: f"{_defaults()['SITUATE_VECTOR_INDEX_MIN_ROWS']:,}"),
    (
        "docs/dagster.md",
        r"vector index from ([\d,]+) rows",
        lambda: f"{_defaults()['SITUATE_VECTOR_INDEX_MIN_ROWS']:,}",
    ),
    (
        "docs/dagster.md",
        r"≤ (\d+) cl100k_base tokens, (\d+) overlap \(source code ≤ (\d+)\)",
        lambda: tuple(str(_defaults()[f"SITUATE_{n}_TOKENS"]) for n in ("CHUNK", "OVERLAP", "CODE_CHUNK")),
    ),
    (
        "docs/dagster.md",
        r"every (\d+) s, `SITUATE_SYNC_INTERVAL_S`",
        lambda: str(_defaults()["SITUATE_SYNC_INTERVAL_S"]),
    ),
    (
        "docs/dagster.md",
        r"`SITUATE_MAX_FALLBACK_SHARE`, default\s+([\d.]+)",
        lambda: str(_defaults()["SITUATE_MAX_FALLBACK_SHARE"]),
    ),
    ("docs/dagster.md", r"`nightly_reingest` \((\d\d:\d\d)\)", _nightly),
    ("docs/dagster.md", r"`max_concurrent_runs: (\d+)`", _max_concurrent_runs),
    ("docs/configuration.md", r"quotes its first line \(≤ (\d+) characters\)", _quote_chars),
    ("docs/using.md", r"A search takes the top (\d+) of dense search", _candidates),
    ("docs/scaling.md", r"at most (\d+) runs in all", _run_attempts),
    ("docs/scaling.md", r"has its (\d+) attempts again", _run_attempts),
    ("README.md", r"code adds to its\s+cosine a share of BM25 \((cosine[^)]*?its best)\)", _code_fusion),
]


@pytest.mark.parametrize("page, pattern, code", FIGURES, ids=[f"{p}:{pat[:30]}" for p, pat, _ in FIGURES])
def test_a_figure_a_page_states_is_the_codes(page, pattern, code):
    found = re.findall(pattern, _page(page))
    assert found, f"{page} no longer states {pattern!r}: change the page and this pattern together"
    stale = [f for f in found if f != code()]
    assert not stale, f"{page} says {stale[0]} where the code says {code()} ({pattern!r})"


def _own_definitions():
    from situate.pipelines.definitions import build_definitions

    return build_definitions(plain=True)


def _section(text: str, start: str) -> str:
    """The paragraph of ``text`` that begins with ``start``, up to the next blank line."""
    at = text.index(start)
    end = text.find("\n\n", at)
    return text[at : end if end >= 0 else len(text)]


def test_dagster_page_names_every_asset_check_and_no_other():
    defs = _own_definitions()
    checks = {a.key.to_user_string(): {s.name for s in a.check_specs} for a in defs.assets}
    page = _page("docs/dagster.md")
    named = set(re.findall(r"`([a-z][a-z0-9_]*)`", _section(page, "Asset checks,")))
    assert len(checks["bm25_index"]) == 7
    every = {name for names in checks.values() for name in names}
    assert every == named - set(checks), "the paragraph names every check of every asset, and no other"
    # each check is named after its asset's own name, before the next asset's
    paragraph = _section(page, "Asset checks,")
    for asset, names in checks.items():
        for name in names:
            assert paragraph.index(f"`{asset}`") < paragraph.index(f"`{name}`"), (asset, name)


def test_dagster_page_lists_the_code_locations_assets_sensors_and_schedules():
    defs = _own_definitions()
    page = _page("docs/dagster.md")
    rows = dict(re.findall(r"^\| `([a-z0-9_]+)` \| ([^|]+) \|", page, re.M))
    code = {a.key.to_user_string(): "per document" if a.partitions_def else None for a in defs.assets}
    assert list(rows) == list(code), "the asset table's names, in the code's order"
    for name, partitioned in code.items():
        assert (rows[name].strip() == "per document") == (partitioned is not None), (name, rows[name])
    for name in [s.name for s in defs.sensors] + [s.name for s in defs.schedules]:
        assert f"`{name}`" in page, name


def _models_table() -> dict[str, list[str]]:
    """README's models table: each row's cells by the name in its first cell's first backticks."""
    section = _page("README.md").split("## Models", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `([^`]+)`", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in line.strip("|").split("|")]
    return rows


def _size_text(size: int) -> str:
    """A file size as the table writes it: MB under a gigabyte, else GB with two decimals."""
    return f"{size / 1e9:.2f} GB" if size >= 1e9 else f"{size / 1e6:,.0f} MB"


def test_readme_models_table_is_the_registrys():
    from situate.resources.models.registry import DEFAULT_EMBED, DEFAULT_LLM, EMBED_MODELS, LLMS

    rows = _models_table()
    assert set(LLMS) | set(EMBED_MODELS) <= set(rows), "every blurb model and embedder has a row"
    for name, row in rows.items():
        if name not in LLMS and name not in EMBED_MODELS:
            continue
        first = row[0]
        assert ("(default" in first) == (name in (DEFAULT_LLM, DEFAULT_EMBED)), (name, first)
        if name in LLMS:
            assert row[2] == _size_text(LLMS[name].size), (name, row[2])
            continue
        m = EMBED_MODELS[name]
        assert row[2] == _size_text(m.files[0].size), (name, row[2])
        assert f"{m.width}-d" in row[1] and f"{m.n_ctx:,} tokens" in row[1], (name, row[1])


def test_configuration_page_lists_every_prompt_and_marks_the_default():
    from situate.contextual.prompts import DEFAULT_PROMPT, PROMPTS

    page = _page("docs/configuration.md")
    listed = re.findall(r"^\| `([a-z0-9+-]+)`(?: / `([a-z0-9+-]+)`)?( \(default\))? \|", page, re.M)
    names = {n for first, second, _ in listed for n in (first, second) if n}
    # "`anthropic-2024+system` / `+system-primed`": the second is written as its suffix
    names = {f"anthropic-2024{n}" if n.startswith("+") else n for n in names}
    assert names == set(PROMPTS)
    assert [first for first, _, default in listed if default] == [DEFAULT_PROMPT]
