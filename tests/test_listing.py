"""Which files of a folder are the project (resources/documents/listing.py and discovery): git's
view of a working tree, the same rules outside git (read by git, and by pathspec without git),
situate's own ignore file and globs, hidden and extensionless files, empty files skipped."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from situate.resources.documents.docs import DocsFolder
from situate.resources.documents.keys import encode_key
from situate.resources.documents.listing import ListingRules, list_project
from situate.resources.documents.reading import discover
from situate.resources.errors import DocumentError


def _write(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@example.org", "-c", "user.name=t", *args], cwd=root, check=True, capture_output=True
    )


#: A working copy after a day's work: nested ignore files with negations, an ignored build output
#: and coverage report, a virtualenv nobody ignored, an empty __init__.py, an extensionless README,
#: a CI workflow, a dotenv file, a file marked generated, and an untracked file that is not ignored.
TREE = {
    ".gitignore": "htmlcov/\nbuild/\n*.txt\n!docs/*.txt\n",
    "docs/.gitignore": "scratch.txt\n",
    ".gitattributes": "docs/api.md linguist-generated\n",
    "docs/guide.md": "# Guide\n\nHow to use it.\n",
    "docs/important.txt": "Kept by a negation.\n",
    "docs/scratch.txt": "Ignored by the nested .gitignore.\n",
    "docs/api.md": "# API\n\nGenerated reference.\n",
    "src/pkg/__init__.py": "",
    "src/pkg/blank.py": "  \n\n",
    "src/pkg/core.py": "def add(a, b):\n    return a + b\n",
    "src/pkg/logo.png": b"\x89PNG\r\n\x1a\n\x00\x00",
    "examples/README": "The examples, each in its folder.\n",
    "bin/tool": "#!/bin/sh\necho tool\n",
    "bin/blob": b"\x7fELF\x00\x01\x02",
    ".github/workflows/ci.yml": "name: ci\non: push\n",
    ".env": "API_KEY=hunter2\n",
    "htmlcov/index.html": "<p>coverage</p>\n",
    "build/lib/pkg/core.py": "def add(a, b):\n    return a + b\n",
    "notes.txt": "root-level txt: ignored\n",
}
UNTRACKED = {
    "draft.md": "# Draft\n\nNot committed, not ignored.\n",
    ".venv/pyvenv.cfg": "home = /usr/bin\n",
    ".venv/lib/site.py": "x = 1\n",
    "env2/pyvenv.cfg": "home = /usr/bin\n",
    "env2/lib/mod.py": "y = 2\n",
    ".cache/thing.md": "# hidden, untracked\n",
}
INDEXED = [
    ".github/workflows/ci.yml",
    "bin/tool",
    "docs/api.md",
    "docs/guide.md",
    "docs/important.txt",
    "draft.md",
    "examples/README",
    "src/pkg/core.py",
]


@pytest.fixture(scope="module")
def work_tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("work") / "repo"
    root.mkdir()
    _write(root, TREE)
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "init")
    _write(root, UNTRACKED)
    return root


def test_a_working_tree_is_what_git_tracks_or_does_not_ignore(work_tree):
    passed_over: dict[str, str] = {}
    refs = discover(work_tree, passed_over)
    assert [r.source for r in refs] == INDEXED
    assert {r.source: r.generated for r in refs if r.generated} == {"docs/api.md": "linguist-generated"}
    assert passed_over["htmlcov/"] == "ignored (.gitignore)"
    assert passed_over["build/"] == "ignored (.gitignore)"
    assert passed_over["docs/scratch.txt"] == "ignored (.gitignore)"
    assert passed_over["notes.txt"] == "ignored (.gitignore)"
    assert passed_over["src/pkg/__init__.py"] == "empty (0 bytes)"
    assert passed_over["src/pkg/blank.py"] == "empty (4 bytes, whitespace only)"
    assert passed_over["src/pkg/logo.png"] == "unknown format (.png)"
    assert passed_over["bin/blob"] == "binary"
    assert passed_over[".env"] == "may hold secrets"
    assert passed_over[".venv/"] == "tool folder"
    assert passed_over["env2/"] == "virtualenv"
    assert passed_over[".cache/"] == "hidden"
    # git's own view agrees: nothing indexed is ignored
    ignored = subprocess.run(
        ["git", "status", "--ignored", "--porcelain"], cwd=work_tree, capture_output=True, text=True, check=True
    ).stdout
    ignored_paths = [line[3:] for line in ignored.splitlines() if line.startswith("!! ")]
    assert not [s for s in INDEXED if any(s == p or s.startswith(p) for p in ignored_paths)]


def test_the_same_folder_outside_git_gives_the_same_documents(work_tree, tmp_path):
    """Without .git, the .gitignore files still apply: read by git (a temporary repository), and by
    pathspec where no git program is used; tracked-only rules (hidden files) then need the folder
    list, so .github/ is read as a project folder."""
    import shutil

    copy = tmp_path / "plain"
    shutil.copytree(work_tree, copy, ignore=shutil.ignore_patterns(".git"))
    by_git = list_project(copy)
    by_pathspec = list_project(copy, ListingRules(use_git=False))
    assert by_git.how == "folder, .gitignore files read by git"
    assert by_pathspec.how.startswith("folder, .gitignore files read by pathspec")
    assert by_git.files == by_pathspec.files
    assert "htmlcov/index.html" not in by_git.files and "docs/important.txt" in by_git.files
    assert by_git.generated == {"docs/api.md": "linguist-generated"}
    assert [r.source for r in discover(copy)] == INDEXED


def test_situateignore_and_globs_narrow_and_widen(work_tree, tmp_path):
    import shutil

    root = tmp_path / "repo"
    shutil.copytree(work_tree, root)
    _write(root, {"docs/.situateignore": "*.md\n!guide.md\n"})
    rules = ListingRules(include=("htmlcov/**",), exclude=("bin/",), generated="skip")
    listing = list_project(root, rules)
    assert "docs/guide.md" in listing.files and "docs/api.md" not in listing.files
    assert "htmlcov/index.html" in listing.files  # widened back
    assert "bin/tool" not in listing.files and listing.skipped["bin/tool"] == "excluded (exclude setting)"
    assert "draft.md" in listing.files
    # a generated file skipped by the setting is said so; with `index` it is read (above)
    _write(root, {"docs/.situateignore": ""})
    listing = list_project(root, rules)
    assert listing.skipped["docs/api.md"] == "generated (linguist-generated)"
    assert ".env" not in list_project(root, ListingRules(include=(".env",))).files  # never


def test_a_hidden_key_resolves_only_where_the_listing_has_it(work_tree):
    docs = DocsFolder(path=str(work_tree))
    ref = docs.resolve(encode_key(".github/workflows/ci.yml"))
    assert ref.source == ".github/workflows/ci.yml"
    with pytest.raises(DocumentError, match="hidden file the docs folder's listing does not hold"):
        docs.resolve(encode_key(".cache/thing.md"))
    assert docs.resolve(encode_key("docs/api.md")).generated == "linguist-generated"


def test_a_nested_repository_is_listed_by_its_own_rules(tmp_path):
    outer = tmp_path / "outer"
    _write(outer, {"a.md": "# A\n", "inner/.gitignore": "out/\n", "inner/b.md": "# B\n", "inner/out/c.md": "# C\n"})
    _git(outer / "inner", "init", "-q")
    listing = list_project(outer)
    assert listing.files == ["a.md", "inner/b.md"]
    assert listing.skipped["inner/out/"] == "ignored (.gitignore)"


def test_what_a_review_found(tmp_path):
    """Credentials by name and by content, include globs that must not reach a virtualenv, an empty
    attribute value, a whitelist in .situateignore, a BOM, a negation under an excluded folder, and
    a name no partition key can hold."""
    _write(
        tmp_path,
        {
            "README.md": "# r\n",
            "id_ed25519": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n-----END OPENSSH PRIVATE KEY-----\n",
            "deploy_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n",
            "env/pyvenv.cfg": "home = /usr/bin\n",
            "env/lib/p/README.md": "# vendored\n",
            ".gitattributes": "a.md linguist-generated=\nb.md linguist-vendored\n",
            "a.md": "# a\n",
            "b.md": "# b\n",
            "docs/.situateignore": "\ufeff*\n!*/\n!*.md\n",
            "docs/d.md": "# d\n",
            "docs/deep/dd.md": "# dd\n",
            "docs/deep/x.txt": "x\n",
            "tests/t.md": "# t\n",
            "tests/keep.md": "# keep\n",
            "tab\there.md": "# tab\n",
        },
    )
    passed_over: dict[str, str] = {}
    rules = ListingRules(include=("**/*.md",), exclude=("tests/", "!tests/keep.md"))
    refs = {r.source: r for r in discover(tmp_path, passed_over, rules)}
    assert sorted(refs) == ["README.md", "a.md", "b.md", "docs/d.md", "docs/deep/dd.md"]
    assert passed_over["id_ed25519"] == "may hold secrets" and passed_over["deploy_key"].startswith("may hold secrets")
    assert passed_over["env/"] == "virtualenv"
    assert passed_over["tests/keep.md"] == "excluded (exclude setting)"  # git: no re-include under an excluded folder
    assert passed_over["docs/deep/x.txt"] == "ignored (.situateignore)"
    assert passed_over["tab\there.md"].startswith("file name has a control character")
    assert refs["b.md"].generated == "linguist-vendored" and refs["a.md"].generated is None


def test_submodules_checked_out_or_not(tmp_path):
    lib = tmp_path / "lib"
    _write(lib, {"lib.md": "# lib\n", ".github/workflows/ci.yml": "name: ci\n"})
    _git(lib, "init", "-q")
    _git(lib, "add", "-A")
    _git(lib, "commit", "-qm", "lib")
    app = tmp_path / "app"
    _write(app, {"app.md": "# app\n"})
    _git(app, "init", "-q")
    for name in ("sub", "sub2"):
        _git(app, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), name)
    _git(app, "commit", "-qm", "app")
    _git(app, "submodule", "deinit", "-q", "sub2")
    listing = list_project(app)
    assert [f for f in listing.files if f.endswith((".md", ".yml"))] == [
        "app.md",
        "sub/.github/workflows/ci.yml",  # tracked in the submodule: read
        "sub/lib.md",
    ]
    assert listing.skipped["sub2/"] == "submodule not checked out"
