"""How many summaries and blurbs shown to a reader name a library, function or file their document
does not contain, call it what it is not, or restate the prompt: counted on the committed blurb
files (``benchmarks/blurbs/``) over the labelled corpora's documents, before and after
:func:`situate.contextual.summary_grounding.ground_summary`.

*Before* is what a reader saw before this grounding: the file's raw answer cleaned, with the
sentences naming code the document lacks dropped.  *After* is what an ingest shows now
(:func:`situate.contextual.contextualize.record_from_raw`: a blurb's sentences naming a library the
document never uses or restating a prompt dropped too; a document summary's sentences calling the
document what it is not as well).  The counting is
:func:`situate.contextual.summary_grounding.summary_problems` on each sentence.  No model is loaded.

Usage::

    python benchmarks/summary_grounding.py [--out benchmarks/reports/summary-grounding.md] \
        [--home "LABEL=DATA_FOLDER" ...]
    python benchmarks/summary_grounding.py --rules [--before COMMIT] \
        [--rules-out benchmarks/reports/summary-grounding-rules]

``--rules`` counts, over every summary of the committed document-mode blurb files (docs and
codebase sets, both models), the sentences and summaries each rule drops, with the cleaning and
grounding of ``--before`` (a commit, read with ``git show``) and of the working tree, and lists
every drop with its hand-read verdict (``benchmarks/reports/summary-grounding-judged.json``),
and the committed answers whose cleaning alone changed (:func:`fragments`):
``summary-grounding-rules.json`` and ``.md`` (about 15 s on 2 cores).

The report's httpx row: encode/httpx at ae1b9f66, its ``docs/*.md`` and ``httpx/*.py`` (46 files,
23 + 23) in a folder, ``situate ingest FOLDER --home H`` with the default settings (2026-12-06, 4
min 5 s on 2 cores), then ``--home "httpx-docs-and-source (46 files, a default ingest)=H"``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CORPORA = {
    "codebase": ROOT / "eval" / "codebase" / "codebase_chunks.json",
    "docs": ROOT / "eval" / "docs" / "docs_chunks.json",
}
#: Modes whose text is a reader's context: the structure mode has no model text, and the questions
#: prompt's lines are indexed for BM25, never shown.
SHOWN = ("document", "chunk:anthropic-2024-primed-about", "chunk:by-reference", "chunk:by-reference-window")


def load_corpus(path: Path) -> dict[str, dict]:
    """``doc_id`` → ``{"text", "chunks": {index: text}, "language"}`` of a cookbook-form corpus."""
    from situate.contextual.summary_grounding import summary_language

    out = {}
    for d in json.loads(path.read_text()):
        chunks = {c["original_index"]: c["content"] for c in d["chunks"]}
        language = summary_language({"format": "corpus", "text": d["content"]})
        out[d["doc_id"]] = {"text": d["content"], "chunks": chunks, "language": language}
    return out


def _before(raw: str, chunk: str, document: str, by_reference: bool) -> str:
    """What a reader saw before this grounding: the answer cleaned, and its sentences naming code
    the document lacks dropped (:func:`situate.contextual.cleaning.ground_blurb`) and no more."""
    from situate.contextual.cleaning import clean_blurb, ground_blurb
    from situate.contextual.contextualize import MARK_RE

    cleaned = clean_blurb(MARK_RE.sub("", raw) if by_reference else raw, chunk)
    return ground_blurb(cleaned.text, document)[0] if cleaned.text else ""


def shown_texts(path: Path, docs: dict[str, dict]) -> list[tuple[str, str, str, str, str]]:
    """``(doc_id, mode, before, after, language)`` for each text a reader sees: one a document
    in document mode (every chunk shows the same summary), one a chunk otherwise.  *After* is what
    an ingest shows now: :func:`situate.contextual.contextualize.record_from_raw`, and for a
    summary :func:`situate.contextual.document_blurbs.grounded_summary` too."""
    from situate.contextual.contextualize import record_from_raw
    from situate.contextual.document_blurbs import grounded_summary

    seen, out = set(), []
    for line in gzip.open(path, "rt"):
        d = json.loads(line)
        if d["mode"] not in SHOWN:
            continue
        doc = docs[d["doc_id"]]
        if d["mode"] == "document":
            if d["doc_id"] in seen:
                continue
            seen.add(d["doc_id"])
            chunk = ""
        else:
            chunk = doc["chunks"][int(d["chunk_id"].rsplit(":", 2)[-2])]
        by_ref = d["mode"].startswith("chunk:by-reference")
        rec = record_from_raw(d["raw"], chunk, doc["text"], by_reference=by_ref)
        if d["mode"] == "document":
            rec = grounded_summary(rec, doc["text"], doc["language"])
        before = _before(d["raw"], chunk, doc["text"], by_ref)
        out.append((d["doc_id"], d["mode"], before, rec.blurb, doc["language"]))
    return out


def _tally(out: dict, name: str, before: str, after: str, document: str, judged: str | None) -> None:
    """Add one shown text (``before`` and ``after`` the grounding, of ``document``; ``judged``:
    the language its kind is judged by, None for a chunk's blurb) to ``out``'s counts, with the
    text as an example or as emptied."""
    from situate.contextual.cleaning import _sentences
    from situate.contextual.summary_grounding import summary_problems

    c = out["counts"]
    faults = [p for s in _sentences(before) if before for p in summary_problems(s, document, judged)]
    left = [p for s in _sentences(after) if after for p in summary_problems(s, document, judged)]
    c["texts"] += 1
    c["empty before"] += not before
    c["flagged before"] += bool(faults)
    for tag in {p.split(":", 1)[0] for p in faults}:
        c[f"{tag} before"] += 1
    c["flagged after"] += bool(left)
    c["emptied"] += bool(before) and not after
    if bool(before) and not after:
        out["emptied"].append((name, before[:200]))
    if faults and len(out["examples"]) < 6:
        out["examples"].append((name, faults[0], before[:160]))


def _counted() -> dict:
    return {"counts": collections.Counter(), "examples": [], "emptied": []}


def count(path: Path, docs: dict[str, dict]) -> dict:
    """Before and after counts of one blurb file, with a few dropped sentences as examples."""
    out = _counted()
    for doc_id, mode, before, after, language in shown_texts(path, docs):
        judged = language if mode == "document" else None  # a chunk's blurb: no language judged
        _tally(out, doc_id, before, after, docs[doc_id]["text"], judged)
    return out | {"counts": dict(out["counts"])}


def count_home(home: Path) -> dict:
    """:func:`count` for the texts an ingest showed, read from a data folder's stage files
    (``stages/<document>/document.json`` and ``blurbs.json``: each model-written text, its raw
    answer and its document), one text a document in document mode and one a chunk otherwise."""
    from situate.contextual.summary_grounding import summary_language

    out = _counted()
    for folder in sorted(p for p in (home / "stages").iterdir() if (p / "blurbs.json").exists()):
        doc = json.loads((folder / "document.json").read_text())
        language, seen = summary_language(doc), set()
        for b in json.loads((folder / "blurbs.json").read_text())["blurbs"]:
            if not b.get("raw") or (b["mode"] == "document" and "document" in seen):
                continue
            seen.add(b["mode"])
            before = _before(b["raw"], "", doc["text"], False)
            judged = language if b["mode"] == "document" else None
            _tally(out, doc["source"], before, b["blurb"], doc["text"], judged)
    return out | {"counts": dict(out["counts"])}


def report(results: dict[str, dict]) -> str:
    per_chunk = collections.Counter()
    for name, r in results.items():
        if not name.endswith("-document") and name.startswith(("codebase-", "docs-")):
            per_chunk.update({k: r["counts"].get(k, 0) for k in ("texts", "flagged before", "flagged after")})
    cols = ["texts", "flagged before", "restated before", "ungrounded before", "wrong-kind before"]
    cols += ["flagged after", "emptied", "empty before"]
    lines = [
        "# Summaries and blurbs that name what their document lacks, or restate the prompt",
        "",
        "Generated by `python benchmarks/summary_grounding.py` from the committed blurb files and",
        "the labelled corpora (no model loaded). A text is *flagged* when one of its sentences",
        "restates a prompt, names a library the document never uses as one or code it does not",
        "contain (*ungrounded*), or (a document summary) calls the document a script or module of",
        "another language (*wrong-kind*). *Before*: the file's answers cleaned, with sentences",
        "naming code the document lacks dropped (an ingest before this grounding); *after*: as an",
        "ingest reads them now (per-chunk blurbs: library and prompt checks too; summaries: their",
        "language as well). *Emptied*: texts the grounding left empty, whose chunks then fall back",
        "to their structural context alone.",
        "",
        "| file | " + " | ".join(cols) + " |",
        "|---" * (len(cols) + 1) + "|",
    ]
    for name, r in results.items():
        lines.append(f"| {name} | " + " | ".join(str(r["counts"].get(k, 0)) for k in cols) + " |")
    lines += ["", "Examples (document, first fault, the text before):", ""]
    for name, r in results.items():
        for doc_id, fault, text in r["examples"][:3]:
            lines.append(f"- {name} {doc_id}: *{fault}* — {text!r}")
    lines += ["", "Texts the grounding left empty (their chunks get the structural context alone):", ""]
    for name, r in results.items():
        lines += [f"- {name} {doc_id}: {text!r}" for doc_id, text in r["emptied"]]
    lines += [
        "",
        "Over the per-chunk files, "
        f"{per_chunk['flagged before']:,} of {per_chunk['texts']:,} blurbs were flagged before and "
        f"{per_chunk['flagged after']:,} after.",
    ]
    return "\n".join(lines) + "\n"


# --- rules: each rule's drops before and after a change (--rules) ---------------------------------

#: The commit whose grounding and cleaning are *before* in ``--rules``: the last before review s6's
#: grounding findings (G2-G4) were fixed.
BEFORE = "ecbcb61"
#: The rules a sentence is dropped by, as :func:`_rules_of` names them.
RULES = ("restated", "ungrounded: library", "ungrounded: name", "wrong-kind")
#: The language a set's entry is judged by in ``--rules`` when no grammar parses it as code: the
#: docs set's entries are Markdown pages, which an ingest judges as ``"prose"``
#: (:func:`situate.contextual.summary_grounding.summary_language`; a corpus entry of ``situate
#: eval`` has no file name, so its language there is None and no kind is judged).
PROSE_SETS = {"docs": "prose"}
#: The hand-read verdicts on dropped sentences (``right``: the drop was correct), committed.
JUDGED = ROOT / "benchmarks" / "reports" / "summary-grounding-judged.json"
_MODULES = ("situate.contextual.cleaning", "situate.contextual.summary_grounding")


def modules_at(rev: str | None) -> dict:
    """:mod:`situate.contextual.cleaning` and :mod:`situate.contextual.summary_grounding` as
    committed at ``rev`` (``git show``; None: the working tree's), by their import names."""
    import importlib
    import subprocess
    import types

    if rev is None:
        return {name: importlib.import_module(name) for name in _MODULES}
    out = {}
    for name in _MODULES:
        path = name.replace(".", "/") + ".py"
        src = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True)
        module = types.ModuleType(name)
        module.__file__ = str(ROOT / path)
        with swapped({**out, name: module}):  # the grounding imports the cleaning of its own commit
            exec(compile(src.stdout, f"{rev}:{path}", "exec"), module.__dict__)
        out[name] = module
    return out


@contextlib.contextmanager
def swapped(modules: dict):
    """``modules`` in :data:`sys.modules` while the block runs (a function's own imports find them)."""
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _rules_of(grounding, problems: list[str], kept: str, document: str, language: str | None) -> set[str]:
    """The rules (:data:`RULES`) of a sentence's ``problems``; an ``ungrounded`` name is a library's
    when :func:`~situate.contextual.summary_grounding.absent_libraries` names it."""
    libraries = set(grounding.absent_libraries(kept, document, prose=language == "prose")) if kept else set()
    out = set()
    for p in problems:
        tag, _, what = p.partition(": ")
        if tag == "ungrounded":
            tag = "ungrounded: library" if what in libraries else "ungrounded: name"
        out.add(tag)
    return out


def judge(mods: dict, raw: str, document: str, language: str | None) -> dict:
    """One summary as ``mods`` (:func:`modules_at`) ground it: the cleaned text's sentences, each
    with what is kept and its rules, and the summary an ingest stores (``clean_blurb`` with the
    document, then ``ground_summary`` with the language, as
    :func:`situate.contextual.document_blurbs.grounded_summary`)."""
    cleaning, grounding = mods[_MODULES[0]], mods[_MODULES[1]]
    with swapped(mods):
        text = cleaning.clean_blurb(raw, "").text
        if hasattr(grounding, "judged_sentences"):
            judged = grounding.judged_sentences(text, document, language)
        else:  # before judged_sentences: ground_summary's own loop, as committed then
            judged = []
            for s in cleaning._sentences(text) if text else []:
                kept, cut = grounding._without_summary_clause(s)
                found = grounding.summary_problems(kept, document, language) if kept else []
                judged.append((s, "" if found else kept, (["restated: cut"] if cut else []) + found))
        stored = cleaning.clean_blurb(raw, "", document=document).text
        stored = grounding.ground_summary(stored, document, language)[0] if stored else ""
    sentences = [
        {"sentence": s, "kept": k, "problems": p, "rules": sorted(_rules_of(grounding, p, s, document, language))}
        for s, k, p in judged
    ]
    return {"cleaned": text, "sentences": sentences, "stored": stored}


def _rule_counts(judged: list[dict]) -> dict:
    """Per rule, the sentences it drops and the summaries it drops one from (``kept``: the others);
    the summaries kept whole and emptied."""
    out = {r: {"sentences dropped": 0, "summaries dropping": 0} for r in RULES}
    out["clause cut"] = {"sentences": 0}
    for j in judged:
        dropped = [s for s in j["sentences"] if not s["kept"]]
        for rule in RULES:
            n = sum(rule in s["rules"] for s in dropped)
            out[rule]["sentences dropped"] += n
            out[rule]["summaries dropping"] += n > 0
        out["clause cut"]["sentences"] += sum(bool(s["kept"]) and s["kept"] != s["sentence"] for s in j["sentences"])
    for rule in RULES:
        out[rule]["summaries keeping"] = len(judged) - out[rule]["summaries dropping"]
    sentences = [s for j in judged for s in j["sentences"]]
    out["totals"] = {
        "summaries": len(judged),
        "sentences": len(sentences),
        "sentences dropped": sum(not s["kept"] for s in sentences),
        "summaries kept whole": sum(all(s["kept"] == s["sentence"] for s in j["sentences"]) for j in judged),
        "summaries emptied": sum(bool(j["cleaned"]) and not j["stored"] for j in judged),
        "empty after cleaning": sum(not j["cleaned"] for j in judged),
    }
    return out


def first_summaries(path: Path) -> list[dict]:
    """The summary lines of a document-mode blurb file, one a document (each chunk's line repeats it)."""
    seen, out = set(), []
    for line in gzip.open(path, "rt"):
        d = json.loads(line)
        if d["mode"] == "document" and d["doc_id"] not in seen:
            seen.add(d["doc_id"])
            out.append(d)
    return out


def _drops(name: str, doc_id: str, before: dict, after: dict) -> list[dict]:
    """The sentences dropped after (and those dropped before only), as rows to read by hand."""
    was = {s["sentence"]: s for s in before["sentences"]}
    rows = []
    for s in after["sentences"]:
        old = was.get(s["sentence"])
        dropped_before = bool(old) and not old["kept"]
        if not s["kept"] or dropped_before:
            rows.append(
                {
                    "file": name,
                    "doc_id": doc_id,
                    "sentence": s["sentence"],
                    "dropped before": dropped_before,
                    "rules before": old["rules"] if old else None,
                    "dropped after": not s["kept"],
                    "rules after": s["rules"],
                    "why after": s["problems"],
                }
            )
    return rows


def measure_rules(before_rev: str = BEFORE) -> dict:
    """:func:`judge` before (``before_rev``) and after (the working tree) over every summary of the
    committed document-mode blurb files, with each rule's counts and the drops to read by hand."""
    corpora = {name: load_corpus(path) for name, path in CORPORA.items()}
    mods = {"before": modules_at(before_rev), "after": modules_at(None)}
    out = {"before": before_rev, "files": {}, "drops": [], "emptied": []}
    for path in sorted((ROOT / "benchmarks" / "blurbs").glob("*-document.jsonl.gz")):
        name, corpus = path.name.removesuffix(".jsonl.gz"), path.name.split("-", 1)[0]
        judged = {k: [] for k in mods}
        for line in first_summaries(path):
            doc = corpora[corpus][line["doc_id"]]
            language = doc["language"] or PROSE_SETS.get(corpus)
            one = {k: judge(m, line["raw"], doc["text"], language) for k, m in mods.items()}
            for k in mods:
                judged[k].append(one[k])
            out["drops"] += _drops(name, line["doc_id"], one["before"], one["after"])
            emptied = [k for k in mods if one[k]["cleaned"] and not one[k]["stored"]]
            if emptied:
                out["emptied"].append(
                    {"file": name, "doc_id": line["doc_id"], "when": emptied, "cleaned": one["after"]["cleaned"]}
                )
        out["files"][name] = {k: _rule_counts(v) for k, v in judged.items()}
    return out | {"judged": precision(out["drops"]), "fragments": fragments(mods)}


def precision(drops: list[dict]) -> dict:
    """The hand-read verdicts (:data:`JUDGED`) on ``drops``, before and after: per rule and in all,
    the drops, how many were read and how many of those were right."""
    verdicts = (
        {(v["file"], v["doc_id"], v["sentence"]): v for v in json.loads(JUDGED.read_text())} if JUDGED.exists() else {}
    )
    out = {}
    for when in ("before", "after"):
        out[when] = {r: {"drops": 0, "read": 0, "right": 0} for r in ("all", *RULES)}
        for d in (d for d in drops if d[f"dropped {when}"]):
            v = verdicts.get((d["file"], d["doc_id"], d["sentence"]))
            for rule in ("all", *d[f"rules {when}"]):
                out[when][rule]["drops"] += 1
                out[when][rule]["read"] += v is not None
                out[when][rule]["right"] += bool(v and v["right"])
    return out


def fragments(mods: dict) -> dict:
    """Per committed blurb file a reader sees (:data:`SHOWN`; a document-mode file's summary once a
    document), the answers whose cleaning (``clean_blurb`` without a document) differs before and
    after (a cut's fragment mended: "…, which is a crucial aspect of."), those the change left
    empty, and every change as ``[before, after]``."""
    out = {}
    for path in sorted((ROOT / "benchmarks" / "blurbs").glob("*.jsonl.gz")):
        c, changes, seen = collections.Counter(), [], set()
        for line in gzip.open(path, "rt"):
            d = json.loads(line)
            if d["mode"] not in SHOWN or (d["mode"] == "document" and d["doc_id"] in seen):
                continue
            seen.add(d["doc_id"])
            old, new = (mods[k][_MODULES[0]].clean_blurb(d["raw"], "").text for k in ("before", "after"))
            c["answers"] += 1
            c["changed"] += old != new
            c["emptied"] += bool(old) and not new
            if old != new:
                changes.append([old, new])
        if c:
            out[path.name.removesuffix(".jsonl.gz")] = dict(c) | {"changes": changes}
    return out


def report_rules(m: dict) -> str:
    """The ``--rules`` report: each rule's drops before and after over each file, the totals, the
    hand-read precision and every drop with its verdict."""
    verdicts = (
        {(v["file"], v["doc_id"], v["sentence"]): v for v in json.loads(JUDGED.read_text())} if JUDGED.exists() else {}
    )
    lines = [
        "# What summary grounding drops, rule by rule, before and after",
        "",
        "Generated by `python benchmarks/summary_grounding.py --rules` (no model loaded) from every",
        "summary of the committed document-mode blurb files (one a document). *Before*: the cleaning",
        f"and grounding committed at {m['before']}; *after*: the working tree's. A summary is the",
        "model's raw answer cleaned (`clean_blurb`), then each sentence judged (`judged_sentences`);",
        "a rule *drops* a summary's sentence, or *keeps* the summary whole (none of its sentences",
        "dropped by that rule). *Stored*: `clean_blurb` with the document, then `ground_summary`",
        "with its language, what an ingest stores; *emptied*: a summary left with nothing, whose",
        "chunks get their structural context alone. A docs-set page that parses as no language is",
        "judged as prose, as an ingest of its Markdown file judges it (`situate eval` gives a corpus",
        "entry no language, and judges no kind).",
        "",
        "| file | rule | sentences dropped before | after | summaries dropping before | after"
        " | keeping before | after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, f in m["files"].items():
        for rule in RULES:
            b, a = f["before"][rule], f["after"][rule]
            lines.append(
                f"| {name} | {rule} | {b['sentences dropped']} | {a['sentences dropped']} | {b['summaries dropping']}"
                f" | {a['summaries dropping']} | {b['summaries keeping']} | {a['summaries keeping']} |"
            )
    lines += [
        "",
        "| file | summaries | sentences cleaned before | after | dropped before | after | clause cut before | after |",
    ]
    lines += ["|---|---|---|---|---|---|---|---|"]
    for name, f in m["files"].items():
        b, a = f["before"], f["after"]
        lines.append(
            f"| {name} | {a['totals']['summaries']} | {b['totals']['sentences']} | {a['totals']['sentences']}"
            f" | {b['totals']['sentences dropped']} | {a['totals']['sentences dropped']}"
            f" | {b['clause cut']['sentences']} | {a['clause cut']['sentences']} |"
        )
    lines += ["", "| file | kept whole before | after | emptied before | after |", "|---|---|---|---|---|"]
    for name, f in m["files"].items():
        b, a = f["before"]["totals"], f["after"]["totals"]
        kept = f"{b['summaries kept whole']} | {a['summaries kept whole']}"
        lines.append(f"| {name} | {kept} | {b['summaries emptied']} | {a['summaries emptied']} |")
    p = m["judged"]
    lines += [
        "",
        "Drops read by hand (`benchmarks/reports/summary-grounding-judged.json`: each dropped sentence",
        "with its verdict, *right* when the sentence was wrong of its document or restated the prompt):",
        "",
        "| rule | drops before | read | right | drops after | read | right |",
        "|---|---|---|---|---|---|---|",
    ]
    for rule in ("all", *RULES):
        b, a = p["before"][rule], p["after"][rule]
        lines.append(
            f"| {rule} | {b['drops']} | {b['read']} | {b['right']} | {a['drops']} | {a['read']} | {a['right']} |"
        )
    lines += [
        "",
        "| file | document | dropped before (rules) | after (rules) | read: right | sentence |",
        "|---|---|---|---|---|---|",
    ]
    for d in m["drops"]:
        v = verdicts.get((d["file"], d["doc_id"], d["sentence"]))
        said = "unread" if v is None else ("yes" if v["right"] else "no") + (f": {v['note']}" if v.get("note") else "")
        b = ", ".join(d["rules before"] or []) if d["dropped before"] else "kept"
        a = ", ".join(d["rules after"]) if d["dropped after"] else "kept"
        lines.append(
            f"| {d['file']} | {d['doc_id']} | {b} | {a} | {said} | {d['sentence'][:220]!r} |".replace("|'", "| '")
        )
    lines += [
        "",
        "Cleaning alone (`clean_blurb` without the document), over every committed answer a reader sees",
        "(a summary once a document): answers whose cleaned text changed (a fragment a cut left at a",
        'sentence\'s end mended: "…, which is a crucial aspect of.") and those the change left empty.',
        "",
        "| file | answers | changed | emptied |",
        "|---|---|---|---|",
    ]
    for name, c in m["fragments"].items():
        lines.append(f"| {name} | {c['answers']} | {c.get('changed', 0)} | {c.get('emptied', 0)} |")
    lines += ["", "Each change (90 characters of the text before → after, where they differ):", ""]
    for name, c in m["fragments"].items():
        for old, new in c["changes"]:
            at = slice(None, 90) if old[-90:] == new[-90:] else slice(-90, None)  # where they differ
            lines.append(f"- {name}: {old[at]!r} → {new[at]!r}")
    lines += ["", "Summaries left empty (their chunks get the structural context alone):", ""]
    lines += [f"- {e['file']} {e['doc_id']} ({', '.join(e['when'])}): {e['cleaned']!r}" for e in m["emptied"]]
    return "\n".join(lines) + "\n"


def main_rules(out: str, before_rev: str) -> int:
    """``--rules``: :func:`measure_rules`, written as ``out``.json and ``out``.md."""
    m = measure_rules(before_rev)
    Path(out + ".json").write_text(json.dumps(m, indent=1, ensure_ascii=False) + "\n")
    text = report_rules(m)
    Path(out + ".md").write_text(text)
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "reports" / "summary-grounding.md"))
    p.add_argument(
        "--home",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="also count the texts an ingest into data folder DIR showed (its stage files), as row LABEL",
    )
    p.add_argument(
        "--rules",
        action="store_true",
        help="count what each rule drops, before (--before) and after, over the document-mode files; write --rules-out",
    )
    p.add_argument("--before", default=BEFORE, help=f"the commit whose grounding is 'before' (default {BEFORE})")
    p.add_argument("--rules-out", default=str(ROOT / "benchmarks" / "reports" / "summary-grounding-rules"))
    args = p.parse_args(argv)
    if args.rules:
        return main_rules(args.rules_out, args.before)
    corpora = {name: load_corpus(path) for name, path in CORPORA.items()}
    results = {}
    for path in sorted((ROOT / "benchmarks" / "blurbs").glob("*.jsonl.gz")):
        corpus = path.name.split("-", 1)[0]
        first = json.loads(gzip.open(path, "rt").readline())
        if corpus in corpora and first["mode"] in SHOWN:
            results[path.name.removesuffix(".jsonl.gz")] = count(path, corpora[corpus])
    for item in args.home:
        label, _, folder = item.partition("=")
        results[label] = count_home(Path(folder))
    text = report(results)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
