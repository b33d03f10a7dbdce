"""Trust boundaries (issue 13), with inputs the tests make themselves: partition keys registered by
hand never reach outside the data and docs folders."""

from __future__ import annotations

import dagster as dg
import pytest
from conftest import needs_models

from situate.resources.documents.keys import PartitionKeyError, check_key, encode_key

#: Keys the UI's "Add partition" accepts (Dagster does not validate dynamic partition keys).
HOSTILE = [
    "..",
    ".._.victim",
    "._2E_.victim",
    "_.tmp_.victim",
    "a_._2E_2E_.b",
    "x_.",
    "a_2Fb",
    "docs/../x",
    "'; DROP",
    "a\nb",
    "",
]


def test_only_canonical_keys_of_relative_paths_pass():
    for source in ("a.md", "docs/getting_started.md", "corpus.json#doc_1", "ünï/côde.py", "notes.", "c.json#.doc"):
        assert check_key(encode_key(source)) == source
    for hidden in (".env", "dir/.git/config"):  # discovery never lists them: never acted on (issue 24)
        with pytest.raises(PartitionKeyError, match="inside .git or a file that may hold secrets"):
            check_key(encode_key(hidden))
    for key in HOSTILE:
        with pytest.raises(PartitionKeyError):
            check_key(key)


def test_the_store_refuses_stage_folders_of_invalid_keys(tmp_path):
    from situate.resources.store.store import Store

    store = Store(home=str(tmp_path / "home"))
    assert store.stage_dir("docs_.a.md") == tmp_path / "home" / "stages" / "docs_.a.md"
    for key in HOSTILE:
        with pytest.raises(PartitionKeyError):
            store.stage_dir(key)


def _victim(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("not situate's")
    return victim


def test_a_sync_leaves_hand_registered_keys_alone(tmp_path):
    from situate.pipelines.automation import apply_to_instance, plan_for
    from situate.pipelines.sync import PARTITIONS
    from situate.resources.documents.docs import Chunking, DocsFolder
    from situate.resources.models.llm import BlurbLLM, Embedder
    from situate.resources.store.store import Store

    victim = _victim(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nsome text\n")
    home = tmp_path / "home"
    store = Store(home=str(home))
    # stage folders that hostile keys would name, relative to stages/: ../../victim, /tmp/victim
    hostile = [
        ".._.victim",
        ".._2E_.victim",
        encode_key("..") + "_." + "victim",
        "_." + str(victim).lstrip("/").replace("/", "_."),
    ]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(PARTITIONS, hostile)
        plan, _ = plan_for(
            instance,
            DocsFolder(path=str(docs)),
            store,
            BlurbLLM(model_path="x.gguf"),
            Embedder(model_path="y.gguf"),
            Chunking(),
        )
        assert plan.removed == [] and set(plan.invalid) == set(hostile)
        order = apply_to_instance(instance, store, plan)
        assert set(hostile) <= set(order)  # reported, not deleted
        assert encode_key("a.md") in order
    assert (victim / "keep.txt").read_text() == "not situate's"


def test_a_run_of_an_invalid_key_touches_nothing(tmp_path):
    from situate.assets.partitions import documents
    from situate.assets.raw_documents import raw_documents
    from situate.resources.documents.docs import DocsFolder
    from situate.resources.store.store import Store

    victim = _victim(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n")
    outside = tmp_path / "outside.md"
    outside.write_text("# secret\n")
    home = tmp_path / "home"
    keys = [".._.outside.md", "_." + str(outside).lstrip("/").replace("/", "_."), ".._.victim"]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(documents.name, keys)
        for key in keys:
            result = dg.materialize(
                [raw_documents],
                partition_key=key,
                instance=instance,
                raise_on_error=False,
                resources={"docs": DocsFolder(path=str(docs)), "store": Store(home=str(home))},
            )
            meta = result.asset_materializations_for_node("raw_documents")[0].metadata
            assert meta["documents_failed"].value == 1 and "invalid partition key" in meta["problems"].value, key
    assert not (home / "stages").exists() or not any((home / "stages").iterdir())
    assert (victim / "keep.txt").exists() and outside.read_text() == "# secret\n"
    # a symbolic link inside the docs folder that points out of it is refused too
    (docs / "link.md").symlink_to(outside)
    with pytest.raises(Exception, match="resolves outside the docs folder"):
        DocsFolder(path=str(docs)).resolve(encode_key("link.md"))


def test_printed_hits_and_failure_lines_carry_no_raw_control_characters(capsys):
    import json
    import sys

    from situate.pipelines.output import EscapingStream, print_hits
    from situate.resources.store.retrieval import Hit

    hostile = "ok\x1b]52;c;ZXZpbA==\x07 \x1b[8mhidden\x1b[0m \x9b2J \u202egnp.exe"
    hit = Hit(1, 0.5, "c1", "d1", f"notes/{hostile}.md", 0, f"blurb {hostile}", f"text {hostile}\nline 2")
    out = sys.stdout
    sys.stdout = EscapingStream(out)
    try:
        print_hits([hit], as_json=False)
        print_hits([hit], as_json=True)
        print(f"situate: failed: notes/{hostile}.md")
    finally:
        sys.stdout = out
    printed = capsys.readouterr().out
    assert not any(
        ord(c) < 32 and c not in "\n\t" or 0x7F <= ord(c) <= 0x9F or 0x202A <= ord(c) <= 0x202E for c in printed
    )
    assert "\\u001b]52;c;ZXZpbA==\\u0007" in printed and "\\u202egnp.exe" in printed
    start = printed.index("[\n  {")
    as_json = printed[start : printed.index("\n]", start) + 2]
    assert json.loads(as_json)[0]["blurb"] == f"blurb {hostile}"  # escapes are valid JSON


def test_a_folder_of_the_users_is_refused_as_a_data_folder_and_keeps_its_files(tmp_path, capsys):
    from situate.pipelines.cli import main

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n")
    mine = tmp_path / "mine"
    (mine / "bm25").mkdir(parents=True)
    (mine / "bm25" / "notes.txt").write_text("my notes")
    (mine / "todo.md").write_text("- x")
    before = sorted(p.relative_to(mine) for p in mine.rglob("*"))
    assert main(["ingest", str(docs), "--home", str(mine)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a non-empty folder that is not a situate data folder" in err[0]
    assert sorted(p.relative_to(mine) for p in mine.rglob("*")) == before
    assert (mine / "bm25" / "notes.txt").read_text() == "my notes"
    # demo and eval refuse it the same way
    assert main(["demo", "--home", str(mine)]) == 2
    assert "not a situate data folder" in capsys.readouterr().err
    assert sorted(p.relative_to(mine) for p in mine.rglob("*")) == before


def test_another_docs_folder_needs_replace(tmp_path, capsys):
    from situate.pipelines.preflight import StartupError, check_data_folder, check_same_docs
    from situate.pipelines.settings import restored_env

    home = check_data_folder(tmp_path / "home")
    assert (home / ".situate-data").is_file() and check_data_folder(home) == home  # marked, then accepted
    (home / "docs-root").write_text(str(tmp_path / "notes"))
    check_same_docs(home, tmp_path / "notes", replace=False)
    with pytest.raises(StartupError, match="holds the documents of .*notes: ingesting .*other would replace them"):
        check_same_docs(home, tmp_path / "other", replace=False)
    check_same_docs(home, tmp_path / "other", replace=True)
    from situate.pipelines.cli import main

    (tmp_path / "other").mkdir()
    with restored_env():
        assert main(["ingest", str(tmp_path / "other"), "--home", str(home)]) == 2
    assert "add --replace" in capsys.readouterr().err


def test_a_data_folder_inside_the_docs_folder_is_not_ingested(tmp_path):
    from situate.pipelines.preflight import check_data_folder
    from situate.resources.documents.reading import discover

    docs = tmp_path / "docs"
    (docs / "index").mkdir(parents=True)
    (docs / "a.md").write_text("# A\n")
    check_data_folder(docs / "index")
    (docs / "index" / "demo-docs").mkdir()
    (docs / "index" / "demo-docs" / "b.md").write_text("# B\n")
    (docs / "index" / "stages").mkdir()
    (docs / "index" / "stages" / "document.json").write_text("{}")
    assert [r.source for r in discover(docs)] == ["a.md"]


def test_odd_files_never_stop_discovery(tmp_path):
    import os

    from situate.resources.documents.docs import DocsFolder
    from situate.resources.documents.reading import DocumentError, discover

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n")
    os.close(os.open(os.path.join(os.fsencode(docs), b"bad-\xff-name.md"), os.O_CREAT | os.O_WRONLY))
    (docs / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    refs = {r.source: r for r in discover(docs)}
    assert set(refs) == {"a.md", "bad-\ufffd-name.md", "deep.json"}
    with pytest.raises(DocumentError, match="file name is not valid UTF-8"):
        DocsFolder(path=str(docs)).resolve(refs["bad-\ufffd-name.md"].key)


def test_keys_round_trip_and_ranges_split_one_way(tmp_path):
    from situate.resources.documents.docs import DocsFolder
    from situate.resources.documents.keys import decode_key
    from situate.resources.documents.reading import discover

    for source in ("notes.", ".profile", "a#b.md", "x.json#doc#1", "dir./.f"):
        key = encode_key(source)
        assert not key.startswith(".") and not key.endswith(".") and ".." not in key
        assert decode_key(key) == source
        if not any(p.startswith(".") for p in source.split("#")[0].split("/")):
            assert check_key(key) == source
    # '#' in a file's own name: found and read
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a#b.md").write_text("# A sharp\n")
    ref = next(r for r in discover(docs) if r.source == "a#b.md")
    assert DocsFolder(path=str(docs)).resolve(ref.key).path == str(docs / "a#b.md")


def test_a_huge_k_gets_one_line(capsys, tmp_path):
    from situate.pipelines.cli import main

    assert main(["search", "x", "-k", str(2**70), "--home", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "-k must be at most 1,000,000" in err[0]


def test_small_inputs_cost_bounded_work(tmp_path, monkeypatch):
    """Counted, not timed: a corpus file is parsed once for all its documents, and a long line of
    blanks is not read as a heading (the regex was quadratic on it)."""
    import json

    from situate.resources.documents import reading as documents_io
    from situate.resources.documents.reading import discover, load, markdown_headings

    corpus = [{"doc_id": f"d{i}", "content": f"text {i}", "chunks": [{"content": f"text {i}"}]} for i in range(50)]
    (tmp_path / "c.json").write_text(json.dumps(corpus))
    parses = []
    real = documents_io.read_corpus
    monkeypatch.setattr(documents_io, "read_corpus", lambda data: parses.append(1) or real(data))
    documents_io.corpus_index.cache_clear()
    refs = discover(tmp_path)
    assert len(refs) == 50 and len(parses) == 1  # discovery
    docs = [load(r) for r in refs]
    assert (
        sorted(d.text for d in docs) == sorted(f"text {i}" for i in range(50)) and len(parses) == 2
    )  # 50 loads, 1 parse
    line = "# " + " " * 50_000 + "x"
    assert markdown_headings(line + "\n## Real heading ##\n") == [[len(line) + 1, 2, "Real heading"]]


def test_a_duplicate_doc_id_in_a_corpus_is_named(tmp_path):
    import json

    from situate.resources.documents.docs import DocsFolder
    from situate.resources.documents.reading import DocumentError, discover, load

    corpus = [
        {"doc_id": "d1", "content": "first", "chunks": [{"content": "first"}]},
        {"doc_id": "d1", "content": "second", "chunks": [{"content": "second"}]},
    ]
    (tmp_path / "c.json").write_text(json.dumps(corpus))
    refs = discover(tmp_path)
    assert [r.source for r in refs] == ["c.json#d1", "c.json#d1#duplicate-2"]
    assert load(refs[0]).text == "first"
    ref = DocsFolder(path=str(tmp_path)).resolve(refs[1].key)
    with pytest.raises(DocumentError, match="doc_id 'd1' appears again \\(occurrence 2\\)"):
        load(ref)


def _pdf(pages: int, text: bytes, shared: bool, compress: bool = False) -> bytes:
    """A real PDF written with pypdf: ``pages`` pages drawing ``text`` in Helvetica, every page
    from one shared content stream object (``shared``) or each from its own."""
    import io

    import pypdf
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    w = pypdf.PdfWriter()
    font = w._add_object(
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
    )

    def stream():
        s = DecodedStreamObject()
        s.set_data(b"BT /F1 12 Tf 72 700 Td (" + text + b") Tj ET")
        return w._add_object(s.flate_encode() if compress else s)

    one = stream()
    for _ in range(pages):
        page = w.add_blank_page(612, 792)
        page[NameObject("/Contents")] = one if shared else stream()
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
    out = io.BytesIO()
    w.write(out)
    return out.getvalue()


def test_pdfs_that_extract_far_more_text_than_their_size_are_bounded():
    from situate.resources.documents.reading import MAX_PDF_CHARS_PER_BYTE, PDF_BASE_CHARS, DocumentError, pdf_to_text

    # 300 pages drawing one shared stream: its text is read once, with a note
    notes = []
    text, _ = pdf_to_text("shared.pdf", _pdf(300, b"the key rotation schedule " * 20, shared=True), notes)
    assert text.count("key rotation schedule") == 20
    assert notes == ["299 PDF pages repeat an earlier page's content stream: read once"]
    # one compressed stream of 400,000 characters in a file of a few KB: a named error
    data = _pdf(1, b"a" * 400_000, shared=False, compress=True)
    limit = PDF_BASE_CHARS + MAX_PDF_CHARS_PER_BYTE * len(data)
    assert len(data) < 5_000 and limit < 400_000
    with pytest.raises(DocumentError, match=f"PDF extracts to over {limit:,} characters"):
        pdf_to_text("bomb.pdf", data)
    # an ordinary multi-page PDF is read whole
    text, _ = pdf_to_text("ok.pdf", _pdf(5, b"an ordinary page of text", shared=False))
    assert text.count("an ordinary page of text") == 5


def test_deeply_nested_html_is_read_as_text_within_the_bound():
    from situate.resources.documents.reading import MAX_HTML_DEPTH, html_depth, html_to_text

    page = b"<html><body><h1>Title</h1><p>one<p>two<ul><li>a<li>b</ul><br><img src=x></body></html>"
    assert html_depth(page.decode()) == 3  # html > body > ul: unclosed <p>/<li> and void tags not counted
    n = 20_000  # 22 s through BeautifulSoup, measured
    notes = []
    text, title, headings = html_to_text("deep.html", (b"<div>" * n + b"deep &amp; text" + b"</div>" * n), notes)
    assert text == "deep & text" and headings == [] and title is None
    assert notes == [
        f"HTML nested {n:,} deep (over {MAX_HTML_DEPTH}): read as text with its tags stripped, no headings"
    ]
    text, title, headings = html_to_text("ok.html", page, [])
    assert title is None and headings == [[0, 1, "Title"]] and "two" in text


def test_a_deeply_nested_source_file_gets_bounded_contexts():
    """Counted, not timed: 3,000 definitions each nested in the last (a 4.5 MB file) give each
    chunk a context of at most MAX_ENCLOSING labels, the innermost correct."""
    from situate.contextual.code_context import MAX_ENCLOSING, chunk_contexts

    text = "".join(" " * i + f"def f{i}():\n" for i in range(3000))
    spans = [(i, i + 200) for i in range(0, len(text) - 200, 2000)]
    contexts = chunk_contexts(text, spans, "no-grammar")
    assert len(contexts) == len(spans) > 2000
    last = contexts[-1].split(" > ")
    assert len(last) == MAX_ENCLOSING + 1 and last[:3] == ["def f0", "def f1", "…"]
    assert last[-1].startswith("def f2999")
    assert max(len(c) for c in contexts) < 40 * (MAX_ENCLOSING + 2)


def test_a_link_swapped_in_after_listing_is_not_followed(tmp_path):
    """Discovery skips links; a file, a folder or a FIFO swapped in between the listing and the
    read is refused at the read, and the outside file's bytes are never read."""
    import os

    from situate.resources.documents.docs import DocsFolder
    from situate.resources.documents.reading import DocumentError, discover, load

    docs, outside = tmp_path / "docs", tmp_path / "outside"
    (docs / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\nthe outside file")
    (outside / "b.md").write_text("# B outside")
    (docs / "a.md").write_text("# A\nan ordinary note")
    (docs / "sub" / "b.md").write_text("# B\nanother note")
    (docs / "c.md").write_text("# C\na third note")
    refs = {r.source: r for r in discover(docs)}
    assert load(refs["a.md"]).text.endswith("an ordinary note")
    # the file itself becomes a link to a file outside
    (docs / "a.md").unlink()
    (docs / "a.md").symlink_to(outside / "secret.md")
    with pytest.raises(DocumentError, match=r"^a\.md: cannot read \(a\.md is a symbolic link: not followed\)$"):
        load(refs["a.md"])
    with pytest.raises(DocumentError, match="resolves outside the docs folder"):
        DocsFolder(path=str(docs)).resolve(refs["a.md"].key)
    # a folder on the way becomes a link to a folder outside
    (docs / "sub").rename(docs / "sub-moved")
    (docs / "sub").symlink_to(outside)
    with pytest.raises(DocumentError, match=r"sub is a symbolic link: not followed"):
        load(refs["sub/b.md"])
    # a FIFO: refused without blocking on the open
    (docs / "c.md").unlink()
    os.mkfifo(docs / "c.md")
    with pytest.raises(DocumentError, match=r"c\.md: cannot read \(not a regular file\)"):
        load(refs["c.md"])
    # and a new listing does not list any of them
    assert [r.source for r in discover(docs)] == ["sub-moved/b.md"]


# -- issue 24, smaller points -----------------------------------------------------------------------


def test_hand_registered_keys_of_hidden_files_are_refused(tmp_path):
    """A key of ``.git`` or a secrets file never passes; another hidden file's key passes the key
    check but is read only where the folder's listing holds it (a tracked ``.github/`` file)."""
    from situate.resources.documents.docs import DocsFolder
    from situate.resources.documents.keys import PartitionKeyError, check_key, encode_key
    from situate.resources.errors import DocumentError

    assert check_key(encode_key("docs/a.md")) == "docs/a.md"
    for hidden in (".env", ".git/config", "docs/.env.production", ".pypirc"):
        with pytest.raises(PartitionKeyError, match="may hold secrets"):
            check_key(encode_key(hidden))
    (tmp_path / "docs" / ".secret").mkdir(parents=True)
    (tmp_path / "docs" / ".secret" / "key.md").write_text("# not listed")
    with pytest.raises(DocumentError, match="hidden file the docs folder's listing does not hold"):
        DocsFolder(path=str(tmp_path)).resolve(encode_key("docs/.secret/key.md"))


def test_data_folder_uris_with_fragment_or_query_characters_are_refused(capsys):
    from situate.pipelines.cli import main
    from situate.resources.store.objects import DataFolderURIError, normalize_home

    assert normalize_home("s3://bucket/team-a/") == "s3://bucket/team-a"
    for uri in ("s3://bucket/team#a", "s3://bucket/team?a=1", "s3://bucket/team%2Fa"):
        with pytest.raises(DataFolderURIError):
            normalize_home(uri)
    assert main(["search", "keys", "--home", "s3://bucket/team#a"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'#'" in err[0] and "fragment" in err[0]


def test_reading_a_folder_that_is_not_a_data_folder_creates_nothing(tmp_path, capsys):
    from fastapi.testclient import TestClient

    from situate.pipelines.cli import main
    from situate.service import create_app

    mine = tmp_path / "my-notes"
    mine.mkdir()
    (mine / "bm25").mkdir()  # the user's own folder named like situate's
    before = sorted(p.name for p in mine.iterdir())
    assert main(["search", "keys", "--home", str(mine)]) == 2
    assert "is not a situate data folder" in capsys.readouterr().err
    h = TestClient(create_app(home=str(mine), hosts=["testserver"])).get("/health").json()
    assert h["status"] == "no data folder"
    assert sorted(p.name for p in mine.iterdir()) == before  # no lancedb/, no dagster/


def test_an_object_store_data_folder_never_chooses_the_local_docs_folder():
    from situate.pipelines.settings import recorded_docs_root

    # no store is reached: the URI alone says the docs-root object is not followed
    assert recorded_docs_root("s3://bucket/shared-team") is None


@needs_models
def test_an_embedding_model_as_the_blurb_model_is_refused_in_one_line():
    from situate.pipelines.preflight import StartupError, check_chat_model
    from situate.pipelines.settings import resources_from_env
    from situate.resources.models import registry as models

    res = resources_from_env(plain=True)
    check_chat_model(res["llm"])  # the default instruct model passes
    nomic = models.install(names=["nomic-embed-text-v1.5"], log=lambda *_: None)["embedder"]  # an embedding GGUF
    with pytest.raises(StartupError, match=r"an embedding model \(nomic-bert\), not a chat model"):
        check_chat_model(res["llm"].model_copy(update={"model_path": str(nomic)}))


def test_a_hand_registered_key_never_fails_the_table_check(tmp_path):
    """A `../x` added in the UI used to raise PartitionKeyError inside rows_match_chunks on every
    bm25_index run, so the index was never rebuilt; it is left alone and named."""
    from situate.contextual.table_checks import rows_match_chunks
    from situate.resources.store.store import Store

    store = Store(home=str(tmp_path / "home"))
    store.write_stage(encode_key("a.md"), "chunks", {"chunks": []})
    ok, md = rows_match_chunks(store, [encode_key("a.md"), "..", ".._.victim"])
    assert ok and md["documents"] == 1 and "'..'" in md["invalid keys left alone"]


def test_stages_of_two_versions_of_one_document_are_never_committed_together():
    """Two runs of one document interleaving stage by stage (issue 24): the rows would carry the new
    version's hash with the old version's text.  The embeddings stage refuses to commit them."""
    from situate.assets.per_document import UpstreamError
    from situate.contextual.indexing import check_one_version

    check_one_version("a.md", {"sha256": "new"}, {"doc_sha256": "new"}, {"doc_sha256": "new"})
    check_one_version("a.md", {"sha256": "new"}, {"chunks": []}, {})  # stage files of an earlier release
    with pytest.raises(UpstreamError, match="changed while this run worked on it"):
        check_one_version("a.md", {"sha256": "new"}, {"doc_sha256": "old"}, {"doc_sha256": "new"})
