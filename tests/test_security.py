"""Trust boundaries (issue 13), with inputs the tests make themselves: partition keys registered by
hand never reach outside the data and docs folders."""

from __future__ import annotations

import dagster as dg
import pytest

from resources.keys import PartitionKeyError, check_key, encode_key

#: Keys the UI's "Add partition" accepts (Dagster does not validate dynamic partition keys).
HOSTILE = ["..", ".._.victim", "._2E_.victim", "_.tmp_.victim", "a_._2E_2E_.b", "x_.", "a_2Fb",
           "docs/../x", "'; DROP", "a\nb", ""]


def test_only_canonical_keys_of_relative_paths_pass():
    for source in ("a.md", "docs/getting_started.md", "corpus.json#doc_1", "ünï/côde.py", "notes.", ".hidden"):
        assert check_key(encode_key(source)) == source
    for key in HOSTILE:
        with pytest.raises(PartitionKeyError):
            check_key(key)


def test_the_store_refuses_stage_folders_of_invalid_keys(tmp_path):
    from resources.store import Store

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
    from pipelines.automation import apply_to_instance, plan_for
    from pipelines.sync import PARTITIONS
    from resources.docs import Chunking, DocsFolder
    from resources.llm import BlurbLLM, Embedder
    from resources.store import Store

    victim = _victim(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nsome text\n")
    home = tmp_path / "home"
    store = Store(home=str(home))
    # stage folders that hostile keys would name, relative to stages/: ../../victim, /tmp/victim
    hostile = [".._.victim", ".._2E_.victim", encode_key("..") + "_." + "victim", "_." + str(victim).lstrip("/").replace("/", "_.")]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(PARTITIONS, hostile)
        plan, _ = plan_for(instance, DocsFolder(path=str(docs)), store, BlurbLLM(model_path="x.gguf"),
                           Embedder(model_path="y.gguf"), Chunking())
        assert plan.removed == [] and set(plan.invalid) == set(hostile)
        order = apply_to_instance(instance, store, plan)
        assert set(hostile) <= set(order)  # reported, not deleted
        assert encode_key("a.md") in order
    assert (victim / "keep.txt").read_text() == "not situate's"


def test_a_run_of_an_invalid_key_touches_nothing(tmp_path):
    from assets.raw_documents import raw_documents
    from pipelines.partitions import documents
    from resources.docs import DocsFolder
    from resources.store import Store

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
            result = dg.materialize([raw_documents], partition_key=key, instance=instance, raise_on_error=False,
                                    resources={"docs": DocsFolder(path=str(docs)), "store": Store(home=str(home))})
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

    from pipelines.cli import EscapingStream, _print_hits
    from resources.retrieval import Hit

    hostile = "ok\x1b]52;c;ZXZpbA==\x07 \x1b[8mhidden\x1b[0m \x9b2J \u202egnp.exe"
    hit = Hit(1, 0.5, "c1", "d1", f"notes/{hostile}.md", 0, f"blurb {hostile}", f"text {hostile}\nline 2")
    out = sys.stdout
    sys.stdout = EscapingStream(out)
    try:
        _print_hits([hit], as_json=False)
        _print_hits([hit], as_json=True)
        print(f"situate: failed: notes/{hostile}.md")
    finally:
        sys.stdout = out
    printed = capsys.readouterr().out
    assert not any(ord(c) < 32 and c not in "\n\t" or 0x7f <= ord(c) <= 0x9f or 0x202a <= ord(c) <= 0x202e
                   for c in printed)
    assert "\\u001b]52;c;ZXZpbA==\\u0007" in printed and "\\u202egnp.exe" in printed
    start = printed.index("[\n  {")
    as_json = printed[start:printed.index("\n]", start) + 2]
    assert json.loads(as_json)[0]["blurb"] == f"blurb {hostile}"  # escapes are valid JSON


def test_a_folder_of_the_users_is_refused_as_a_data_folder_and_keeps_its_files(tmp_path, capsys):
    from pipelines.cli import main

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
    from pipelines.preflight import StartupError, check_data_folder, check_same_docs
    from pipelines.settings import restored_env

    home = check_data_folder(tmp_path / "home")
    assert (home / ".situate-data").is_file() and check_data_folder(home) == home  # marked, then accepted
    (home / "docs-root").write_text(str(tmp_path / "notes"))
    check_same_docs(home, tmp_path / "notes", replace=False)
    with pytest.raises(StartupError, match="holds the documents of .*notes: ingesting .*other would replace them"):
        check_same_docs(home, tmp_path / "other", replace=False)
    check_same_docs(home, tmp_path / "other", replace=True)
    from pipelines.cli import main

    (tmp_path / "other").mkdir()
    with restored_env():
        assert main(["ingest", str(tmp_path / "other"), "--home", str(home)]) == 2
    assert "add --replace" in capsys.readouterr().err


def test_a_data_folder_inside_the_docs_folder_is_not_ingested(tmp_path):
    from assets.documents_io import discover
    from pipelines.preflight import check_data_folder

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

    from assets.documents_io import DocumentError, discover
    from resources.docs import DocsFolder

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
    from assets.documents_io import discover
    from resources.docs import DocsFolder

    for source in ("notes.", ".profile", "a#b.md", "x.json#doc#1", "dir./.f"):
        key = encode_key(source)
        assert not key.startswith(".") and not key.endswith(".") and ".." not in key
        assert check_key(key) == source
    # '#' in a file's own name: found and read
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a#b.md").write_text("# A sharp\n")
    ref = next(r for r in discover(docs) if r.source == "a#b.md")
    assert DocsFolder(path=str(docs)).resolve(ref.key).path == str(docs / "a#b.md")


def test_a_huge_k_gets_one_line(capsys, tmp_path):
    from pipelines.cli import main

    assert main(["search", "x", "-k", str(2 ** 70), "--home", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "-k must be at most 1,000,000" in err[0]


def test_small_inputs_cost_bounded_work(tmp_path, monkeypatch):
    """Counted, not timed: a corpus file is parsed once for all its documents, and a long line of
    blanks is not read as a heading (the regex was quadratic on it)."""
    import json

    from assets import documents_io
    from assets.documents_io import discover, load, markdown_headings

    corpus = [{"doc_id": f"d{i}", "content": f"text {i}", "chunks": [{"content": f"text {i}"}]} for i in range(50)]
    (tmp_path / "c.json").write_text(json.dumps(corpus))
    parses = []
    real = documents_io.read_corpus
    monkeypatch.setattr(documents_io, "read_corpus", lambda data: parses.append(1) or real(data))
    documents_io.corpus_index.cache_clear()
    refs = discover(tmp_path)
    assert len(refs) == 50 and len(parses) == 1  # discovery
    docs = [load(r) for r in refs]
    assert sorted(d.text for d in docs) == sorted(f"text {i}" for i in range(50)) and len(parses) == 2  # 50 loads, 1 parse
    line = "# " + " " * 50_000 + "x"
    assert markdown_headings(line + "\n## Real heading ##\n") == [[len(line) + 1, 2, "Real heading"]]


def test_a_duplicate_doc_id_in_a_corpus_is_named(tmp_path):
    import json

    from assets.documents_io import DocumentError, discover, load
    from resources.docs import DocsFolder

    corpus = [{"doc_id": "d1", "content": "first", "chunks": [{"content": "first"}]},
              {"doc_id": "d1", "content": "second", "chunks": [{"content": "second"}]}]
    (tmp_path / "c.json").write_text(json.dumps(corpus))
    refs = discover(tmp_path)
    assert [r.source for r in refs] == ["c.json#d1", "c.json#d1#duplicate-2"]
    assert load(refs[0]).text == "first"
    ref = DocsFolder(path=str(tmp_path)).resolve(refs[1].key)
    with pytest.raises(DocumentError, match="doc_id 'd1' appears again \\(occurrence 2\\)"):
        load(ref)
