"""The settings table (``resources/settings.py``): it lists every ``SITUATE_*`` variable the code
reads, the configuration page is generated from it, and a typo'd variable is named at start
instead of being ignored in silence."""

import ast
import re
from pathlib import Path

import pytest

from resources.models.llm import SETTING_BOUNDS
from resources.settings import SETTINGS, SETTINGS_BY_NAME, reference_markdown, unknown_settings

ROOT = Path(__file__).resolve().parent.parent
#: Strings that name a group of settings in messages ("SITUATE_LLM_URL and the other SITUATE_LLM
#: settings"), not a variable.
GROUP_LABELS = {"SITUATE_LLM", "SITUATE_EMBED"}


def _names_in_code() -> dict[str, str]:
    """Every string constant that is exactly a ``SITUATE_*`` name, in the package's modules."""
    found = {}
    for folder in ("assets", "resources", "pipelines", "situate"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    if re.fullmatch(r"SITUATE_[A-Z0-9_]+", node.value):
                        found.setdefault(node.value, str(path.relative_to(ROOT)))
    return found


def test_every_variable_the_code_reads_is_in_the_table():
    names = _names_in_code()
    assert len(names) >= 40  # the walk finds the code's settings
    missing = {n: where for n, where in names.items() if n not in SETTINGS_BY_NAME and n not in GROUP_LABELS}
    assert not missing, missing
    assert set(SETTING_BOUNDS) <= set(SETTINGS_BY_NAME)  # every bounded setting is listed
    assert len(SETTINGS_BY_NAME) == len(SETTINGS)  # no name twice
    # and nothing listed that no code reads
    assert set(SETTINGS_BY_NAME) - set(names) == set()


def test_the_configuration_page_is_the_generated_table():
    page = (ROOT / "docs" / "configuration.md").read_text()
    m = re.search(r"<!-- settings:begin[^>]*-->\n(.*?)<!-- settings:end -->", page, re.S)
    assert m, "docs/configuration.md has no settings markers"
    assert m.group(1) == reference_markdown(), "regenerate it: python -m resources.settings"
    assert "| `SITUATE_N_CTX` | " in m.group(1) and "| 1 to 131,072 |" in m.group(1)


def test_a_typo_is_named_with_the_closest_setting(monkeypatch):
    from pipelines.settings import check_environment

    assert unknown_settings({"SITUATE_N_CTX": "1", "SITUATE_CHUNK_TOKEN": "400", "SITUATE_ZZZ": "1"}) == [
        ("SITUATE_CHUNK_TOKEN", "SITUATE_CHUNK_TOKENS"),
        ("SITUATE_ZZZ", None),
    ]
    monkeypatch.setenv("SITUATE_CHUNK_TOKEN", "400")
    with pytest.warns(UserWarning, match=r"SITUATE_CHUNK_TOKEN is not a situate setting.*SITUATE_CHUNK_TOKENS"):
        check_environment()


@pytest.mark.parametrize("name", ["SITUATE_FLASH_ATTN", "SITUATE_LLM_REPACK", "SITUATE_LLM_BATCH"])
def test_an_on_off_setting_takes_0_or_1(monkeypatch, name):
    from pipelines.preflight import StartupError
    from pipelines.settings import resources_from_env

    monkeypatch.setenv(name, "yes")
    with pytest.raises(StartupError, match=rf"{name}='yes': set 1 \(on\) or 0 \(off\)"):
        resources_from_env(plain=True)
