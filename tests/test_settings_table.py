"""The settings table (``resources/settings.py``): it lists every ``SITUATE_*`` variable the code
reads, the configuration page is generated from it, and a typo'd variable is named at start
instead of being ignored in silence."""

import ast
import os
import re
from pathlib import Path

import pytest

from situate.resources.settings import (
    SETTING_BOUNDS,
    SETTINGS,
    SETTINGS_BY_NAME,
    reference_markdown,
    unknown_settings,
)

ROOT = Path(__file__).resolve().parent.parent
#: Strings that name a group of settings in messages ("SITUATE_LLM_URL and the other SITUATE_LLM
#: settings"), not a variable.
GROUP_LABELS = {"SITUATE_LLM", "SITUATE_EMBED"}


def _names_in_code() -> dict[str, str]:
    """Every string constant that is exactly a ``SITUATE_*`` name, in the package's modules."""
    found = {}
    for folder in ("assets", "resources", "pipelines", "situate"):
        for path in (ROOT / folder).rglob("*.py"):
            if path == ROOT / "resources" / "settings.py":  # where the fields are: not a use
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    if re.fullmatch(r"SITUATE_[A-Z0-9_]+", node.value):
                        found.setdefault(node.value, str(path.relative_to(ROOT)))
    return found


def test_every_variable_the_code_reads_is_in_the_table():
    names = _names_in_code()
    assert len(names) >= 30  # the walk finds the code's settings (those read through a field are not named)
    missing = {n: where for n, where in names.items() if n not in SETTINGS_BY_NAME and n not in GROUP_LABELS}
    assert not missing, missing
    assert set(SETTING_BOUNDS) <= set(SETTINGS_BY_NAME)  # every bounded setting is listed
    assert len(SETTINGS_BY_NAME) == len(SETTINGS)  # no name twice
    # and nothing listed that no code uses: its variable named, or its field read (``settings.n_ctx``)
    code = "\n".join(
        p.read_text()
        for folder in ("assets", "resources", "pipelines", "situate")
        for p in (ROOT / folder).rglob("*.py")
        if p != ROOT / "resources" / "settings.py"
    )
    unused = [s.name for s in SETTINGS if s.name not in names and f".{s.field}" not in code]
    assert unused == []


def test_the_configuration_page_is_the_generated_table():
    page = (ROOT / "docs" / "configuration.md").read_text()
    m = re.search(r"<!-- settings:begin[^>]*-->\n(.*?)<!-- settings:end -->", page, re.S)
    assert m, "docs/configuration.md has no settings markers"
    assert m.group(1) == reference_markdown(), "regenerate it: python -m situate.resources.settings"
    assert "| `SITUATE_N_CTX` | " in m.group(1) and "| 1 to 131,072 |" in m.group(1)


def test_a_typo_is_named_with_the_closest_setting(monkeypatch):
    from situate.pipelines.settings import check_environment

    assert unknown_settings({"SITUATE_N_CTX": "1", "SITUATE_CHUNK_TOKEN": "400", "SITUATE_ZZZ": "1"}) == [
        ("SITUATE_CHUNK_TOKEN", "SITUATE_CHUNK_TOKENS"),
        ("SITUATE_ZZZ", None),
    ]
    monkeypatch.setenv("SITUATE_CHUNK_TOKEN", "400")
    with pytest.warns(UserWarning, match=r"SITUATE_CHUNK_TOKEN is not a situate setting.*SITUATE_CHUNK_TOKENS"):
        check_environment()
    # the command prints it once, as one line of its own, not Python's two-line warning
    import subprocess
    import sys

    env = os.environ | {"SITUATE_CHUNK_TOKEN": "400"}
    cmd = [sys.executable, "-m", "situate.pipelines.cli", "search", "x", "--home", str(ROOT / "no-such-folder")]
    err = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120).stderr.splitlines()
    line = "situate: warning: SITUATE_CHUNK_TOKEN is not a situate setting and is ignored"
    assert [x for x in err if "SITUATE_CHUNK_TOKEN" in x] == [f"{line} (did you mean SITUATE_CHUNK_TOKENS?)"], err


@pytest.mark.parametrize("name", ["SITUATE_FLASH_ATTN", "SITUATE_LLM_REPACK", "SITUATE_LLM_BATCH"])
def test_an_on_off_setting_takes_0_or_1(monkeypatch, name):
    from situate.pipelines.preflight import StartupError
    from situate.pipelines.settings import resources_from_env

    monkeypatch.setenv(name, "yes")
    with pytest.raises(StartupError, match=rf"{name}='yes': set 1 \(on\) or 0 \(off\)"):
        resources_from_env(plain=True)


def _is_environ(node) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and getattr(node.value, "id", "") == "os"


def uses_in(source: str, where: str) -> tuple[list[str], list[str]]:
    """``(reads, writes)`` of a ``SITUATE_*`` variable through ``os.environ`` or ``os.getenv`` in
    one module's ``source``, as ``where:line NAME``; a name given by a module constant
    (``TOKEN_ENV = "SITUATE_API_TOKEN"``) counts."""
    tree = ast.parse(source)
    consts = {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
        for t in n.targets
        if isinstance(t, ast.Name)
    }

    def name_of(arg):
        value = arg.value if isinstance(arg, ast.Constant) else consts.get(getattr(arg, "id", ""))
        return value if isinstance(value, str) and value.startswith("SITUATE_") else None

    reads, writes = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
            f = node.func
            env_call = (_is_environ(f.value) and f.attr in ("get", "pop", "setdefault")) or (
                f.attr == "getenv" and getattr(f.value, "id", "") == "os"
            )
            name = name_of(node.args[0]) if env_call else None
            if name:
                (writes if f.attr in ("pop", "setdefault") else reads).append(f"{where}:{node.lineno} {name}")
        elif isinstance(node, ast.Subscript) and _is_environ(node.value):
            name = name_of(node.slice)
            if name:
                out = writes if isinstance(node.ctx, (ast.Store, ast.Del)) else reads
                out.append(f"{where}:{node.lineno} {name}")
    return reads, writes


def test_settings_are_read_only_through_the_settings_module():
    reads, writes = [], []
    for folder in ("assets", "resources", "pipelines", "situate"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            r, w = uses_in(path.read_text(), str(path.relative_to(ROOT)))
            reads, writes = reads + r, writes + w
    assert reads == []
    # a command's own folders and blurb file are overrides in the settings module, not writes
    assert writes == []


def test_the_read_check_sees_each_form_of_read():
    src = (
        'import os\nTOKEN = "SITUATE_API_TOKEN"\n'
        'a = os.environ.get("SITUATE_HOME")\nb = os.environ["SITUATE_DOCS"]\nc = os.getenv(TOKEN)\n'
        'os.environ["SITUATE_HOME"] = "x"\nd = os.environ.get("HOME")\n'
    )
    reads, writes = uses_in(src, "m.py")
    assert reads == ["m.py:3 SITUATE_HOME", "m.py:4 SITUATE_DOCS", "m.py:5 SITUATE_API_TOKEN"]
    assert writes == ["m.py:6 SITUATE_HOME"]


def test_the_blurb_llm_defaults_agree_with_the_settings():
    """A ``BlurbLLM`` built directly and the one the settings build with nothing set decode alike
    (the repeat penalty was 1.3 in one and the model's 1.1 in the other)."""
    from situate.pipelines.settings import resources_from_env
    from situate.resources.models.llm import BlurbLLM

    built = resources_from_env(plain=True)["llm"]
    direct = BlurbLLM(model_path=built.model_path)
    for field in ("repeat_penalty", "n_ctx", "max_tokens", "prompt", "context", "batch", "document_tokens"):
        assert getattr(direct, field) == getattr(built, field), field


def test_run_settings_are_read_when_the_run_starts(monkeypatch):
    """Settings an asset's run config falls back to are read at the run, not when the code
    location is imported: one set after the import applies."""
    from situate.assets.retrieval_eval import EvalConfig, eval_command
    from situate.contextual.table_checks import max_fallback_share
    from situate.resources.errors import SettingError

    assert max_fallback_share() == 0.9
    monkeypatch.setenv("SITUATE_MAX_FALLBACK_SHARE", "0.25")
    assert max_fallback_share() == 0.25
    monkeypatch.setenv("SITUATE_MAX_FALLBACK_SHARE", "2")
    with pytest.raises(SettingError, match="SITUATE_MAX_FALLBACK_SHARE=2"):
        max_fallback_share()
    monkeypatch.setenv("SITUATE_EVAL_CORPUS", "corpus.json")
    cmd = eval_command(EvalConfig(), "/tmp/out.json")
    assert cmd[cmd.index("--corpus") + 1].endswith("/corpus.json") and "--queries" not in cmd


def test_each_default_is_written_once():
    """:data:`situate.resources.settings.DEFAULTS` is the default: the reference shows it, and the
    resources' field defaults and the modules' constants that predate it equal it."""
    from situate.contextual.prompts import DEFAULT_PROMPT
    from situate.contextual.table_checks import MAX_FALLBACK_SHARE
    from situate.resources.documents.docs import CHUNK_TOKENS, OVERLAP_TOKENS, Chunking
    from situate.resources.models.llm import BlurbLLM
    from situate.resources.models.reranker import SEARCH_RERANK_DEPTH
    from situate.resources.settings import DEFAULTS
    from situate.resources.store.leases import STALE_S

    for name, value in DEFAULTS.items():
        shown = SETTINGS_BY_NAME[name].default
        text = f"`{value}`" if isinstance(value, str) else f"{value:g}"
        assert shown == text, (name, shown, text)
    constants = {
        "SITUATE_PROMPT": DEFAULT_PROMPT,
        "SITUATE_MAX_FALLBACK_SHARE": MAX_FALLBACK_SHARE,
        "SITUATE_CHUNK_TOKENS": CHUNK_TOKENS,
        "SITUATE_OVERLAP_TOKENS": OVERLAP_TOKENS,
        "SITUATE_RERANK_DEPTH": SEARCH_RERANK_DEPTH,
        "SITUATE_LEASE_STALE_S": STALE_S,
    }
    assert {n: DEFAULTS[n] for n in constants} == constants
    fields = {
        "SITUATE_N_CTX": "n_ctx",
        "SITUATE_MAX_TOKENS": "max_tokens",
        "SITUATE_BATCH": "batch",
        "SITUATE_CONTEXT": "context",
        "SITUATE_PROMPT": "prompt",
        "SITUATE_DOCUMENT_TOKENS": "document_tokens",
        "SITUATE_MAX_BLURB_CHUNKS": "max_chunks_per_document",
        "SITUATE_KV_TYPE": "kv_type",
        "SITUATE_LLM_IN_FLIGHT": "in_flight",
        "SITUATE_LLM_RETRIES": "server_retries",
        "SITUATE_LLM_TIMEOUT": "server_timeout",
    }
    llm_defaults = {n: BlurbLLM.model_fields[f].default for n, f in fields.items()}
    assert llm_defaults == {n: DEFAULTS[n] for n in fields}
    chunking = Chunking.model_fields
    assert (
        chunking["chunk_tokens"].default,
        chunking["code_chunk_tokens"].default,
        chunking["overlap_tokens"].default,
    ) == (DEFAULTS["SITUATE_CHUNK_TOKENS"], DEFAULTS["SITUATE_CODE_CHUNK_TOKENS"], DEFAULTS["SITUATE_OVERLAP_TOKENS"])


def test_a_commands_folders_are_overrides_not_environment_writes(monkeypatch, tmp_path):
    """``prepare_env`` points this process at a data folder and docs folder without writing the
    environment; the overrides win over the environment, reach a child process through
    ``child_environ``, and end with ``restored_overrides``."""
    from situate.pipelines.operations import prepare_env
    from situate.resources.settings import child_environ, env, override, restored_overrides

    monkeypatch.setenv("SITUATE_HOME", "/from/the/environment")
    monkeypatch.delenv("SITUATE_DOCS", raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    with restored_overrides():
        prepare_env(str(tmp_path / "data"), str(tmp_path / "docs"))
        assert env("SITUATE_HOME") == str(tmp_path / "data")
        assert env("SITUATE_DOCS") == str(tmp_path / "docs")
        assert os.environ["SITUATE_HOME"] == "/from/the/environment"
        assert "SITUATE_DOCS" not in os.environ
        assert child_environ()["SITUATE_HOME"] == str(tmp_path / "data")
        assert env("SITUATE_HOME", environ={"SITUATE_HOME": "/given"}) == "/given"
        with pytest.raises(KeyError, match="SITUATE_HOMEE is not a situate setting"):
            override("SITUATE_HOMEE", "x")
    assert env("SITUATE_HOME") == "/from/the/environment"
    assert env("SITUATE_DOCS") == ""


def test_the_settings_are_one_typed_frozen_object():
    """``read_settings`` gives each field its type (a number, a switch, text) or its default; a
    ``Settings`` made directly is held to the same bounds; it cannot be changed; no key is in its
    repr (so in no log)."""
    import dataclasses

    from situate.resources.errors import SettingError, SituateError
    from situate.resources.settings import Settings, read_settings

    s = read_settings(
        {"SITUATE_N_CTX": " 4096 ", "SITUATE_FLASH_ATTN": "1", "SITUATE_REPEAT_PENALTY": "1.05", "SITUATE_HOME": "/d"}
    )
    assert (s.n_ctx, s.flash_attn, s.repeat_penalty, s.home) == (4096, True, 1.05, "/d")
    assert (s.chunk_tokens, s.code_chunk_tokens, s.overlap_tokens, s.llm_repack) == (300, 200, 20, False)
    assert read_settings({"SITUATE_N_CTX": ""}).n_ctx == 8192  # empty is unset
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.n_ctx = 1
    with pytest.raises(SettingError, match=r"SITUATE_CHUNK_TOKENS=0 is below its minimum, 1"):
        Settings(chunk_tokens=0)
    with pytest.raises(SituateError, match=r"SITUATE_OVERLAP_TOKENS=100 is not below SITUATE_CHUNK_TOKENS=100"):
        Settings(chunk_tokens=100, overlap_tokens=100)
    with pytest.raises(SettingError, match=r"SITUATE_N_THREADS='two' is not a whole number"):
        read_settings({"SITUATE_N_THREADS": "two"})
    secret = read_settings({"SITUATE_API_TOKEN": "tok-123", "SITUATE_LLM_API_KEY": "key-456"})
    assert secret.api_token == "tok-123" and "tok-123" not in repr(secret) and "key-456" not in repr(secret)


def test_nothing_is_read_when_the_code_location_is_imported():
    """Importing every asset module reads no setting: with ``SITUATE_DOCS_PER_RUN=abc`` (and a bad
    fallback share) the imports succeed; building the definitions is what refuses it, by name."""
    import subprocess
    import sys

    code = (
        "import situate.assets.partitions, situate.assets.blurbs, situate.assets.bm25_index, "
        "situate.assets.embeddings, situate.assets.chunks; print('imported')"
    )
    env = {**os.environ, "SITUATE_DOCS_PER_RUN": "abc", "SITUATE_MAX_FALLBACK_SHARE": "x"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "imported" in out.stdout, out.stderr[-2000:]
    build = "from situate.pipelines.definitions import build_definitions"
    out = subprocess.run([sys.executable, "-c", build], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "SITUATE_DOCS_PER_RUN='abc' is not a whole number" in out.stderr
