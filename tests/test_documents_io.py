import json

import pytest

from situate.assets.partitions import decode_key
from situate.resources.documents.keys import encode_key
from situate.resources.documents.reading import DocumentError, SourceRef, discover, load, rst_headings


def make_pdf(text_lines: list[str]) -> bytes:
    """A minimal one-page PDF whose text layer holds ``text_lines`` (Helvetica, WinAnsi)."""
    stream = "BT /F1 12 Tf 72 720 Td 14 TL " + " ".join(f"({t}) Tj T*" for t in text_lines) + " ET"
    objs = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        "/Resources << /Font << /F1 5 0 R >> >> >>",
        f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    out, offsets = b"%PDF-1.4\n", []
    for n, body in enumerate(objs, start=1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "intro.md").write_text("# Intro\n\nHello there.\n\n## Setup\n\nRun it.\n")
    (tmp_path / "notes.rst").write_text("Release notes\n=============\n\nFixed.\n\nDetails\n-------\n\nMore.\n")
    (tmp_path / "page.html").write_text(
        "<html><head><title>Page T</title><style>p{}</style><script>var x=1;</script></head>"
        "<body><h1>Top</h1><p>First <b>para</b>.</p><h2>Sub</h2><p>Second.</p></body></html>"
    )
    (tmp_path / "paper.pdf").write_bytes(make_pdf(["Contextual retrieval", "reduces failures."]))
    (tmp_path / "tool.py").write_text('"""Tool."""\n\ndef run():\n    return 1\n')
    (tmp_path / "plain.txt").write_text("Just text.\n")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n")
    (tmp_path / ".hidden.md").write_text("# secret\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config.md").write_text("# no\n")
    return tmp_path


def test_discover_finds_documents_and_skips_the_rest(folder):
    refs = discover(folder)
    assert [r.source for r in refs] == ["guide/intro.md", "notes.rst", "page.html", "paper.pdf", "plain.txt", "tool.py"]
    assert all(decode_key(r.key) == r.source for r in refs)
    assert all(len(r.sha256) == 64 for r in refs)


def test_formats_titles_and_headings(folder):
    docs = {r.source: load(r) for r in discover(folder)}
    md = docs["guide/intro.md"]
    assert (md.format, md.title) == ("markdown", "Intro")
    assert [h[1:] for h in md.headings] == [[1, "Intro"], [2, "Setup"]]
    rst = docs["notes.rst"]
    assert (rst.format, rst.title) == ("rst", "Release notes")
    assert [h[1:] for h in rst.headings] == [[1, "Release notes"], [2, "Details"]]
    html = docs["page.html"]
    assert html.title == "Page T" and "<" not in html.text and "var x" not in html.text
    assert "First para." in html.text and "Second." in html.text
    assert [(html.text[h[0] : h[0] + len(h[2])], h[1]) for h in html.headings] == [("Top", 1), ("Sub", 2)]
    pdf = docs["paper.pdf"]
    assert pdf.format == "pdf" and "Contextual retrieval" in pdf.text and "reduces failures." in pdf.text
    assert docs["tool.py"].format == "code" and docs["tool.py"].title == "tool.py"
    assert docs["plain.txt"].title == "Just text."


def test_rst_overlined_titles():
    text = "=====\nTitle\n=====\n\nSection\n-------\n\nbody\n"
    assert [h[1:] for h in rst_headings(text)] == [[1, "Title"], [2, "Section"]]


@pytest.mark.parametrize(
    "name, data, reason",
    [
        ("empty.txt", b"", "empty (0 bytes)"),
        ("blank.md", b"  \n\n ", "empty (5 bytes, whitespace only)"),
        ("bin.txt", b"ab\x00cd", "binary content (NUL byte at offset 2)"),
        ("scan.pdf", None, "PDF has no text layer"),
        ("broken.pdf", b"%PDF-1.4\nnot really", "unreadable PDF"),
    ],
)
def test_bad_inputs_get_named_errors(tmp_path, name, data, reason):
    if data is None:
        import io

        import pypdf

        w = pypdf.PdfWriter()
        w.add_blank_page(612, 792)
        buf = io.BytesIO()
        w.write(buf)
        data = buf.getvalue()
    (tmp_path / name).write_bytes(data)
    passed_over: dict[str, str] = {}
    refs = discover(tmp_path, passed_over)
    if reason.startswith("empty"):  # not a document: skipped and named; emptied after listing, it fails
        assert refs == [] and passed_over == {name: reason}
        refs = [SourceRef(encode_key(name), name, str(tmp_path / name), "listed-before")]
    (ref,) = refs
    with pytest.raises(DocumentError) as err:
        load(ref)
    assert err.value.source == name
    assert str(err.value).startswith(f"{name}: ") and reason in str(err.value)


def test_corpus_file_expands_to_its_documents(tmp_path):
    corpus = [
        {
            "doc_id": "doc_1",
            "original_uuid": "u",
            "content": "fn a() {}\n\nfn b() {}",
            "chunks": [
                {"chunk_id": "doc_1_chunk_0", "original_index": 0, "content": "fn a() {}"},
                {"chunk_id": "doc_1_chunk_1", "original_index": 1, "content": "fn b() {}"},
            ],
        },
        {
            "doc_id": "doc_2",
            "original_uuid": "v",
            "content": "x = 1",
            "chunks": [{"chunk_id": "doc_2_chunk_0", "original_index": 0, "content": "x = 1"}],
        },
    ]
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    (tmp_path / "settings.json").write_text('{"not": "a corpus"}')
    refs = discover(tmp_path)
    assert [r.source for r in refs] == ["corpus.json#doc_1", "corpus.json#doc_2", "settings.json"]
    doc = load(refs[0])
    assert (doc.doc_id, doc.format, doc.given_chunks) == ("doc_1", "corpus", [[0, "fn a() {}"], [1, "fn b() {}"]])
    assert refs[0].sha256 != refs[1].sha256
    assert load(refs[2]).format == "code"


def test_real_cookbook_corpus_has_90_documents_and_737_chunks():
    from conftest import SHARED_EVAL

    path = SHARED_EVAL / "codebase_chunks.json"
    refs = discover(path)
    docs = [load(r) for r in refs]
    assert len(docs) == 90 and sum(len(d.given_chunks) for d in docs) == 737
    doc70 = next(d for d in docs if d.doc_id == "doc_70")
    assert len(doc70.given_chunks) == 83 and len(doc70.text) == 54328


def test_huge_file_gets_a_named_error(tmp_path, monkeypatch):
    import situate.resources.documents.reading as dio

    monkeypatch.setattr(dio, "MAX_FILE_BYTES", 1000)
    (tmp_path / "big.txt").write_text("x" * 1001)
    (ref,) = discover(tmp_path)
    with pytest.raises(DocumentError, match=r"big.txt: too large \(1,001 bytes > 1,000\)"):
        load(ref)


@pytest.mark.parametrize(
    "name, data, text, note",
    [
        (
            "cp1252.txt",
            "Le café crème coûte 3 €, déjà payé.\n".encode("cp1252"),
            "Le café crème coûte 3 €, déjà payé.\n",
            "decoded as cp1252",
        ),
        (
            "mixed.md",
            "naïve UTF-8 line\n".encode() + b"stray Latin-1 byte: caf\xe9\n",
            "naïve UTF-8 line\nstray Latin-1 byte: caf\ufffd\n",
            "mixed encodings: 1 invalid byte(s) replaced",
        ),
        ("utf16.txt", "UTF-16 text, 東京\r\n".encode("utf-16"), "UTF-16 text, 東京\n", "UTF-16"),
        ("plain.txt", "Ordinary UTF-8: 東京 🚀 مرحبا\n".encode(), "Ordinary UTF-8: 東京 🚀 مرحبا\n", None),
    ],
)
def test_other_encodings_are_decoded_and_say_so(tmp_path, name, data, text, note):
    (tmp_path / name).write_bytes(data)
    (ref,) = discover(tmp_path)
    doc = load(ref)
    assert doc.text == text
    if note is None:
        assert doc.notes == []
    else:
        assert len(doc.notes) == 1 and note in doc.notes[0]


def test_unreadable_and_vanishing_files_do_not_stop_discovery(tmp_path, monkeypatch):
    """Root reads any file, so the faults are injected: a FAKE PermissionError for one file and a
    FAKE FileNotFoundError (deleted after listing) for another."""
    from pathlib import Path

    for name in ("good.md", "locked.md", "gone.md"):
        (tmp_path / name).write_text(f"# {name}\n\nSome text.\n")
    from situate.resources.documents import reading as documents_io

    real_read, real_stat = documents_io.read_under, Path.stat

    def read_under(root, parts, limit=None):
        if parts[-1] == "locked.md":
            raise PermissionError(13, "Permission denied")
        return real_read(root, parts, limit)

    def stat(self, *a, **k):
        if self.name == "gone.md":
            raise FileNotFoundError(2, "No such file or directory")
        return real_stat(self, *a, **k)

    monkeypatch.setattr(documents_io, "read_under", read_under)
    refs = {r.source: r for r in discover(tmp_path)}
    assert set(refs) == {"good.md", "locked.md", "gone.md"} and refs["locked.md"].sha256 == "unreadable:13"
    monkeypatch.setattr(Path, "stat", stat)
    refs = {r.source: r for r in discover(tmp_path)}
    assert "gone.md" not in refs and refs["locked.md"].sha256 == "unreadable:13"
    assert load(refs["good.md"]).title == "good.md"
    with pytest.raises(DocumentError, match=r"locked.md: cannot read \(Permission denied\)"):
        load(refs["locked.md"])


def test_symlinks_are_never_followed(tmp_path):
    """A linked folder and a linked file pointing outside the docs folder are not read."""
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "secret.md").write_text("# Secret\n\nNot part of the docs.\n")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "own.md").write_text("# Own\n\nPart of the docs.\n")
    (docs / "linked-folder").symlink_to(outside / "sub", target_is_directory=True)
    (docs / "linked-file.md").symlink_to(outside / "sub" / "secret.md")
    (docs / "loop").symlink_to(docs, target_is_directory=True)
    assert [r.source for r in discover(docs)] == ["own.md"]


def test_a_file_changed_after_listing_is_indexed_as_read(tmp_path):
    """The rows carry the sha256 of the bytes actually indexed, so the next sync neither misses a
    later change nor re-ingests what was already indexed."""
    import hashlib

    (tmp_path / "live.md").write_text("# Live\n\nfirst version\n")
    (ref,) = discover(tmp_path)
    (tmp_path / "live.md").write_text("# Live\n\nsecond version, written during the run\n")
    doc = load(ref)
    assert "second version" in doc.text
    assert doc.sha256 == hashlib.sha256((tmp_path / "live.md").read_bytes()).hexdigest() != ref.sha256
    assert doc.notes == ["changed since the folder was listed: indexed as read now"]
    (again,) = discover(tmp_path)
    assert again.sha256 == doc.sha256 and load(again).notes == []


def test_a_changelog_of_sibling_versions_nests_no_version_in_another(tmp_path):
    """A real changelog (python-dotenv's, shipped in its package metadata) as a project keeps it:
    ``CHANGES.md`` of ``## [version]`` sections with ``### Fixed`` / ``### Added`` under them and no
    title heading.  No version is taken for the document's title, and each chunk's context names
    its own version alone (never ``[1.2.4] > [1.2.2]``)."""
    import importlib.metadata

    from situate.contextual.chunking import make_chunks
    from situate.contextual.code_context import document_contexts
    from situate.contextual.tokens import count_cl100k

    text = importlib.metadata.metadata("python-dotenv").get_payload()
    text = text[text.index("## [Unreleased]") :]
    (tmp_path / "CHANGES.md").write_text(text)
    (ref,) = discover(tmp_path)
    doc = load(ref)
    assert doc.title == "CHANGES.md" and sum(h[1] == 2 for h in doc.headings) > 10
    chunks = make_chunks(ref.key, doc.text, doc.headings, count_cl100k, 120, 0)
    contexts = document_contexts(doc.to_json(), [(c.start, c.end) for c in chunks], [c.heading_path for c in chunks])
    version_titles = {h[2] for h in doc.headings if h[1] == 2}
    for c, context in zip(chunks, contexts, strict=True):
        versions = [h for h in c.heading_path if h in version_titles]
        assert len(versions) == 1, (c.heading_path, context)
        own = max((h for h in doc.headings if h[0] <= c.start and h[1] == 2), key=lambda h: h[0])
        assert versions == [own[2]] and context.startswith(f"CHANGES.md > {own[2]}")
