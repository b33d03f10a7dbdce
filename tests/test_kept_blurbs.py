"""Issue 32, findings 1, 2 and 5 end to end: what is kept across ingests is what a model wrote, is
checked again against the new document, and is exported under the version it now serves.

Real parts: the real ingest (Dagster runs in process), the default LLM where a blurb must be
written, real files.  A blurb file (:mod:`situate.contextual.blurb_files`) plants blurbs that name a function
of the guide, so the test does not depend on what the 0.5B model chooses to write; the model then
writes the chunks whose planted blurb an edit made wrong.
"""

import os

import pytest
from conftest import ingest_with as _ingest
from conftest import needs_models, small_settings

pytestmark = [needs_models, pytest.mark.models]

SECTIONS = [
    (
        "Key rotation guide",
        "This guide explains how the vault service replaces its signing keys without downtime. "
        "Operators run the rotation monthly, and after any suspected leak of a key. The steps below assume the "
        "admin shell and an operator account with the key-admin role; other roles cannot start a rotation, and "
        "the shell refuses them with a permission error that names the missing role.",
    ),
    (
        "Before you start",
        "Check that every replica of the vault service is healthy and that the audit log is "
        "writable. A replica that is down during the rotation keeps the old key until it restarts, and clients "
        "routed to it fail to verify new tokens. The health page shows each replica with its uptime, its version "
        "and the fingerprint of the key it signs with; all of them must show the same fingerprint.",
    ),
    (
        "The rotation call",
        "Call the rotation function from the admin shell:\n\n```python\nfrom vault.admin import "
        "rotate_keys\nrotate_keys(grace_period=3600)\n```\n\nThe grace period is in seconds. The call returns "
        "the new key's fingerprint and the time at which the old key stops verifying signatures.",
    ),
    (
        "Grace period",
        "During the grace period both keys verify signatures, but only the new key signs. Tokens "
        "signed with the old key stay valid until they expire or the period ends, whichever comes first. A longer "
        "period suits services with long-lived sessions; a shorter one limits how long a leaked key is useful to "
        "an attacker, so after a leak use the shortest period your clients tolerate.",
    ),
    (
        "Checking the result",
        "The admin page lists the active key with its fingerprint and creation date. Compare "
        "the fingerprint with the one printed by the rotation call, then sign a test token and verify it from a "
        "client outside the cluster. If the client reports an unknown key, its key cache has not been refreshed "
        "yet; clients refresh every five minutes by default.",
    ),
    (
        "Rolling back",
        "If clients fail to verify tokens, restore the previous key from the encrypted backup and "
        "open an incident. Rolling back is safe while the grace period lasts, because the previous key still "
        "verifies every token it signed. After the period ends a rollback invalidates the tokens signed with the "
        "new key, and every user has to sign in again.",
    ),
    (
        "Audit trail",
        "Every rotation writes an audit record with the operator, the time and both fingerprints. "
        "Records are kept for seven years under the retention policy, in the append-only audit store. Security "
        "reviews read them to confirm that keys were replaced on schedule and that each emergency rotation had "
        "an incident attached.",
    ),
    (
        "Automation",
        "A scheduled job can start the rotation each month. It pages the on-call operator when a "
        "replica does not confirm the new key within ten minutes, and it never rolls back on its own. The job's "
        "settings live in the scheduler's configuration file, beside the other maintenance jobs of the service.",
    ),
    (
        "Client libraries",
        "The client libraries fetch the public keys from the discovery endpoint and cache "
        "them. A library older than version 3 caches keys for a day, which is longer than the default grace "
        "period; upgrade such clients before shortening the period, or they reject valid tokens.",
    ),
    (
        "Hardware modules",
        "Where the keys live in a hardware security module, the rotation asks the module to "
        "generate the new key, and the private half never leaves it. The module's own audit log records the "
        "request next to the vault's audit record.",
    ),
    (
        "Emergency rotation",
        "After a suspected leak, rotate at once with the shortest grace period, revoke the "
        "sessions of the affected users, and tell the security team. The incident record names the leaked "
        "fingerprint so that reviewers can trace every token it signed.",
    ),
    (
        "Frequently asked questions",
        "Rotation does not change user passwords, API tokens issued by other "
        "services, or the encryption keys of stored data. Those have their own procedures in the operations "
        "handbook, in the chapters on credentials and on storage.",
    ),
]


def guide(name: str = "rotate_keys") -> str:
    return "\n\n".join(f"## {h}\n\n{b}" for h, b in SECTIONS).replace("rotate_keys", name) + "\n"


def _rows(home):
    from situate.resources.store.store import Store

    cols = ["source", "chunk_index", "text", "blurb", "blurb_status", "doc_sha256", "blurb_doc_sha256"]
    return sorted(Store(home=str(home)).columns(cols).to_pylist(), key=lambda r: (r["source"], r["chunk_index"]))


def _llm_for(docs, home):
    """The blurb LLM resource an ingest with :func:`small_settings` uses."""
    from situate.pipelines.settings import resources_from_env, restored_env

    settings = small_settings(docs, home)
    with restored_env(tuple(settings)):
        os.environ.update(settings)
        return resources_from_env(plain=True)["llm"]


def _llm_sha() -> str:
    from situate.resources.models import registry as models
    from situate.resources.store.cache import file_sha256

    return file_sha256(str(models.path_of(models.LLM)))


def _plant(rows, path, naming: bool):
    """A blurb file (real, gzip) with a blurb for every row's chunk, as the default model's lines in
    the default chunk mode; with ``naming``, every other blurb names ``rotate_keys``."""
    from situate.contextual import blurb_files
    from situate.contextual.edits import text_sha256

    lines = []
    for r in rows:
        what = "the rotate_keys guide" if naming and r["chunk_index"] % 2 == 0 else "the key rotation guide"
        raw = f"This chunk is about {what} of the vault service, section {r['chunk_index']}."
        lines.append(
            {
                "chunk_id": f"guide:{r['chunk_index']}",
                "doc_id": "guide",
                "text_sha256": text_sha256(r["text"]),
                "doc_sha256": r["doc_sha256"],
                "mode": "chunk:anthropic-2024-primed-about",
                "model_sha256": _llm_sha(),
                "raw": raw,
                "blurb": raw,
                "status": "model",
            }
        )
    blurb_files.write(path, lines)
    return path


def test_a_fixed_n_ctx_writes_the_blurbs_it_could_not(tmp_path):
    """Finding 1: fallbacks no model wrote are not kept once the setting that made them is fixed."""
    docs, home = tmp_path / "docs", tmp_path / "home"
    docs.mkdir()
    (docs / "guide.md").write_text(guide())
    first = _ingest(docs, home, SITUATE_N_CTX="64")
    rows = _rows(home)
    assert len(rows) >= 4 and first.model_calls == 0
    assert all(r["blurb_status"].startswith("fallback:n_ctx 64") for r in rows), rows[0]
    fixed = _ingest(docs, home, SITUATE_N_CTX="768")
    after = _rows(home)
    assert fixed.blurbs_kept == 0 and fixed.model_calls == len(after) == len(rows)
    assert sum(r["blurb_status"] == "model" for r in after) >= len(after) - 1
    assert "SITUATE_N_CTX" in rows[0]["blurb_status"]  # the reason names the setting to fix


def test_a_raised_chunk_limit_situates_only_the_skipped_document(tmp_path):
    """Finding 1: a document over SITUATE_MAX_BLURB_CHUNKS gets its blurbs once the limit is raised,
    and the document that had its blurbs costs no LLM call."""
    docs, home = tmp_path / "docs", tmp_path / "home"
    docs.mkdir()
    (docs / "guide.md").write_text(guide())
    (docs / "note.md").write_text(
        "## Release note\n\nVersion 2.4 of the vault service adds a grace period to "
        "key rotation and a fingerprint column to the admin page.\n"
    )
    first = _ingest(docs, home, SITUATE_MAX_BLURB_CHUNKS="2")
    rows = _rows(home)
    big = [r for r in rows if r["source"] == "guide.md"]
    assert len(big) > 2 and {r["blurb_status"] for r in big} == {"skipped:large-document"}
    small = [r for r in rows if r["source"] == "note.md"]
    assert len(small) == 1 and small[0]["blurb_status"] == "model" and first.model_calls == 1
    raised = _ingest(docs, home, SITUATE_MAX_BLURB_CHUNKS="0")
    after = _rows(home)
    assert raised.model_calls == len(big)  # only the chunks that were skipped
    assert sum(r["blurb_status"] == "model" for r in after if r["source"] == "guide.md") >= len(big) - 1
    assert [r["blurb"] for r in after if r["source"] == "note.md"] == [small[0]["blurb"]]


def test_an_edit_keeps_no_blurb_naming_what_it_removed(tmp_path):
    """Finding 2: a kept blurb is cleaned and grounded again against the new version; those that
    name what the edit removed are written again by the model, the others are kept."""
    from situate.contextual.cleaning import absent_names

    docs, home = tmp_path / "docs", tmp_path / "home"
    docs.mkdir()
    (docs / "guide.md").write_text(guide())
    _ingest(docs, home, SITUATE_CONTEXT="structure")  # the chunks and the document's sha256
    rows = _rows(home)
    assert len(rows) >= 6
    # plant: every other chunk's blurb names rotate_keys (defined in one chunk only)
    planted = _plant(rows, tmp_path / "planted.jsonl.gz", naming=True)
    given = _ingest(docs, home, SITUATE_BLURBS_FILE=str(planted))
    assert given.model_calls == 0
    naming = [r["chunk_index"] for r in _rows(home) if "rotate_keys" in r["blurb"]]
    assert len(naming) == (len(rows) + 1) // 2

    (docs / "guide.md").write_text(guide("renew_keys"))  # one chunk's text changes
    edited = _ingest(docs, home, SITUATE_BLURBS_FILE=str(planted))  # still set: its blurbs may be kept
    after = _rows(home)
    new_doc = guide("renew_keys")
    changed = [r for r in after if r["text"] not in {b["text"] for b in rows}]
    assert len(changed) == 1 and "renew_keys" in changed[0]["text"]
    assert not [r["blurb"] for r in after if "rotate_keys" in r["blurb"]]
    assert [
        (r["chunk_index"], absent_names(r["blurb"], new_doc)) for r in after if absent_names(r["blurb"], new_doc)
    ] == []
    rewritten = set(naming) | {changed[0]["chunk_index"]}
    assert edited.model_calls == len(rewritten) and edited.blurbs_kept == len(after) - len(rewritten)
    new_sha = after[0]["doc_sha256"]
    for r in after:  # kept rows still name the version their blurb was written against
        assert r["blurb_doc_sha256"] == (new_sha if r["chunk_index"] in rewritten else rows[0]["doc_sha256"])


def test_a_blurb_file_saved_after_an_edit_finds_every_chunk_again(tmp_path):
    """Finding 5: blurbs kept across an edit are exported under the version they now serve, so the
    file re-loads with no LLM call; the file is written under another name and renamed into place."""
    from situate.pipelines.evaluate import write_blurb_file
    from situate.resources.store.store import Store

    docs, home = tmp_path / "docs", tmp_path / "home"
    docs.mkdir()
    (docs / "guide.md").write_text(guide())
    _ingest(docs, home, SITUATE_CONTEXT="structure")
    rows = _rows(home)
    planted = _plant(rows, tmp_path / "planted.jsonl.gz", naming=False)
    _ingest(docs, home, SITUATE_BLURBS_FILE=str(planted))
    (docs / "guide.md").write_text(guide().replace("seven years", "ten years"))  # one chunk changes
    edited = _ingest(docs, home, SITUATE_BLURBS_FILE=str(planted))
    after = _rows(home)
    assert edited.model_calls == 1 and edited.blurbs_kept == len(after) - 1
    out = tmp_path / "saved.jsonl.gz"
    out.write_bytes(b"an older file")
    inode = out.stat().st_ino
    llm = _llm_for(docs, home)
    assert write_blurb_file(Store(home=str(home)), llm, str(out)) == len(after)
    again = _ingest(docs, tmp_path / "home2", SITUATE_BLURBS_FILE=str(out))
    assert again.model_calls == 0 and again.failed == {}
    assert [r["blurb"] for r in _rows(tmp_path / "home2")] == [r["blurb"] for r in after]
    # written under another name and renamed into place: never a half-written file at ``out``
    assert out.stat().st_ino != inode and [p.name for p in tmp_path.iterdir() if ".part" in p.name] == []


def test_a_removed_blurb_file_supplies_no_more_blurbs(tmp_path):
    """Review of finding 4: blurbs taken from a file were stored as the model's, so they were kept
    by every later ingest after the file was removed, and exported as the model's.  They carry
    the file they came from: kept only while that file is set, exported with status ``file``."""
    from situate.pipelines.evaluate import write_blurb_file
    from situate.resources.store.store import Store

    docs, home = tmp_path / "docs", tmp_path / "home"
    docs.mkdir()
    (docs / "guide.md").write_text(guide())
    _ingest(docs, home, SITUATE_CONTEXT="structure")
    rows = _rows(home)
    planted = _plant(rows, tmp_path / "planted.jsonl.gz", naming=False)
    given = _ingest(docs, home, SITUATE_BLURBS_FILE=str(planted))
    from_file = {r["blurb"] for r in _rows(home)}
    assert given.model_calls == 0 and all("key rotation guide" in b for b in from_file)
    out = tmp_path / "saved.jsonl.gz"
    llm = _llm_for(docs, home)
    assert write_blurb_file(Store(home=str(home)), llm, str(out)) == len(rows)
    import gzip
    import json

    with gzip.open(out, "rt") as f:
        assert {json.loads(x)["status"] for x in f} == {"file"}  # not passed off as this model's
    again = _ingest(docs, home, SITUATE_BLURBS_FILE=str(planted))  # still set: kept, no call
    assert again.model_calls == 0
    removed = _ingest(docs, home)  # the file is no longer set: the model writes every chunk
    after = _rows(home)
    assert removed.blurbs_kept == 0 and removed.model_calls == len(after) == len(rows)
    assert not [r["blurb"] for r in after if r["blurb"] in from_file]


def test_a_blurb_kept_through_small_edits_goes_once_its_own_version_is_far(tmp_path):
    """Review of finding 2: the 20% bound was measured against the previous version only, so a
    blurb could be kept through any number of small edits while the document drifted far from the
    text its model read.  Each kept blurb is now measured against its own version."""
    docs, home = tmp_path / "docs", tmp_path / "home"
    docs.mkdir()
    (docs / "guide.md").write_text(guide())
    _ingest(docs, home, SITUATE_CONTEXT="structure")
    v1 = _rows(home)
    assert len(v1) == 8
    planted = _plant(v1, tmp_path / "planted.jsonl.gz", naming=False)
    _ingest(docs, home, SITUATE_BLURBS_FILE=str(planted))
    # edit 1: one chunk of about 9% of the tokens ("Checking the result")
    v2_text = guide().replace("every five minutes", "every ten minutes")
    (docs / "guide.md").write_text(v2_text)
    first = _ingest(docs, home, SITUATE_BLURBS_FILE=str(planted))
    v2 = _rows(home)
    assert first.model_calls == 1 and first.blurbs_kept == 7
    (changed1,) = [r["chunk_index"] for r in v2 if r["text"] not in {x["text"] for x in v1}]
    # edit 2: another chunk, about 16% ("Audit trail"): 16% away from version 2, 25% from version 1
    (docs / "guide.md").write_text(v2_text.replace("seven years", "ten years"))
    second = _ingest(docs, home, SITUATE_BLURBS_FILE=str(planted))
    v3 = _rows(home)
    (changed2,) = [r["chunk_index"] for r in v3 if r["text"] not in {x["text"] for x in v2}]
    # only the blurb written against version 2 is kept; those written against version 1 are written again
    assert second.blurbs_kept == 1 and second.model_calls == 7
    v2_sha, v3_sha = v2[0]["doc_sha256"], v3[0]["doc_sha256"]
    assert [r["blurb_doc_sha256"] for r in v3] == [v2_sha if r["chunk_index"] == changed1 else v3_sha for r in v3]
    assert changed1 != changed2
