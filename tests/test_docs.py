"""The README as a front page and the docs site: the README stays short, the site builds with no
warning (mkdocs --strict: a broken link or a page left out of the nav fails it), what users read
names no issue numbers, and the Python snippets of the docs run as written, with the real default
models, on a real document (tiktoken's README from its wheel metadata)."""

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_models

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: The front page's bound, in lines (the README names what situate is, the two commands, the models
#: and links; the rest is the docs site).
README_MAX_LINES = 200


def _user_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def python_snippets(page: Path) -> list[str]:
    """The fenced ``python`` blocks of a Markdown page, in order."""
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, len(lines)
    # it links every page of the site, and each link resolves
    links = re.findall(r"\]\((docs/[^)#]+)", "\n".join(lines))
    assert {Path(link).name for link in links} >= {p.name for p in DOCS.glob("*.md") if p.name != "index.md"}
    assert all((ROOT / link).exists() for link in links), [link for link in links if not (ROOT / link).exists()]


def test_no_issue_numbers_in_what_users_read():
    """Neither the pages nor the package's docstrings and comments cite this project's tracker,
    which a reader of the code cannot see (an upstream project's issue, named with its project, may
    be cited)."""
    code = [p for d in ("assets", "resources", "pipelines", "situate") for p in sorted((ROOT / d).rglob("*.py"))]
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in [*_user_pages(), *code]}
    found = [
        (name, m.group(0))
        for name, text in texts.items()
        for m in re.finditer(r"\b[Ii]ssue ?#?\d+", text)
        if not re.search(r"[\w-]+/[\w.-]+ $", text[max(0, m.start() - 60) : m.start()])  # owner/project issue N
    ]
    assert not found, found


#: A list item: a bullet (``-``, ``*``, ``+``) or ``1.``, the only number that starts a list a
#: reader means (a wrapped line that begins "2026. The" is a sentence).
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|1[.)])\s+\S")


def lists_glued_to_a_paragraph(text: str) -> list[tuple[int, str]]:
    """The lines of a Markdown page (outside fenced code) that start a list directly under a
    paragraph line, with no blank line between: Python-Markdown, which builds the site, then reads
    the list as part of the paragraph (one run-on line), and ``mkdocs --strict`` says nothing.
    Returns (line number from 1, line) pairs."""
    found, in_list, prev_blank, fence, prev = [], False, True, None, ""
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence or stripped.startswith(("```", "~~~")):
            fence = None if fence and stripped.startswith(fence) else fence or stripped[:3]
            prev_blank = False
            continue
        if not stripped:
            prev_blank = True
            continue
        if LIST_ITEM.match(line):
            if not prev_blank and not in_list and not prev.lstrip().startswith("#"):
                found.append((n, line))
            in_list = True
        elif prev_blank and not line.startswith((" ", "\t")):
            in_list = False
        prev, prev_blank = line, False
    return found


def test_a_list_glued_to_a_paragraph_is_found():
    page = "Two figures:\n- the first\n- the second\n\nApart:\n\n- fine\n  wrapped\n- fine\n"
    assert lists_glued_to_a_paragraph(page) == [(2, "- the first")]
    code = "```bash\necho one\n- not markdown\n```\nIn\n2026. The year.\n## Head\n- under a heading\n"
    assert lists_glued_to_a_paragraph(code) == []


def test_no_page_glues_a_list_to_a_paragraph():
    """Every list of the pages has a blank line above it (what the strict build does not check)."""
    found = {str(p.relative_to(ROOT)): lists_glued_to_a_paragraph(p.read_text()) for p in _user_pages()}
    assert not {k: v for k, v in found.items() if v}, found


def test_docs_site_builds_with_no_warning(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "WARNING" not in out.stderr, out.stderr[-3000:]
    quality = (tmp_path / "quality" / "index.html").read_text()
    assert "Pass@20" in quality and "failure@20" in quality  # a page with its tables
    assert (tmp_path / "search-page.png").exists()  # the screenshot the application page shows


@needs_models
@pytest.mark.models
def test_the_python_snippets_of_the_docs_run(tmp_path):
    """The application page's snippets, in order, in one folder: the API's ingest and search, then
    the LangChain and LlamaIndex retrievers over the same data folder."""
    snippets = python_snippets(DOCS / "application.md")
    assert len(snippets) >= 2
    docs = tmp_path / "docs"
    docs.mkdir()
    text = importlib.metadata.metadata("tiktoken").get_payload()[:2500]
    (docs / "tiktoken-README.md").write_text(text[: text.rfind("\n") + 1])
    script = "\n".join(snippets) + (
        "\nassert docs and docs[0].metadata['source'] == 'tiktoken-README.md', docs"
        "\nassert nodes and nodes[0].node.metadata['source'] == 'tiktoken-README.md', nodes\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SITUATE_", "DAGSTER_"))}
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=1200
    )
    assert out.returncode == 0, out.stderr[-3000:]
    printed = out.stdout.splitlines()
    # the first snippet prints each hit: its source, then its blurb, then its text
    assert printed and printed[0].startswith("tiktoken-README.md "), printed
    assert any(line.startswith("  context: ") and len(line) > len("  context: ") for line in printed), printed
