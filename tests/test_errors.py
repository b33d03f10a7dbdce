"""One base for situate's errors: every exception class situate defines derives from
``SituateError`` and keeps its built-in base, so an application catches them in one clause."""

import importlib
import inspect
import pkgutil

import pytest

import situate
from situate.resources import errors

PACKAGES = ("situate", "situate.assets", "situate.resources", "situate.pipelines")


def _own_exception_classes() -> dict[str, type]:
    """Every exception class defined (not imported) in a module of situate's packages."""
    found = {}
    for pkg_name in PACKAGES:
        pkg = importlib.import_module(pkg_name)
        names = [pkg_name] + [m.name for m in pkgutil.walk_packages(pkg.__path__, f"{pkg_name}.")]
        for name in names:
            mod = importlib.import_module(name)
            for obj in vars(mod).values():
                if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == mod.__name__:
                    found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def test_every_error_has_the_common_base():
    classes = _own_exception_classes()
    # warnings are not errors; everything else situate raises on purpose has the base
    errs = {k: c for k, c in classes.items() if not issubclass(c, Warning)}
    assert len(errs) >= 19, sorted(errs)  # the base and 18 errors
    assert all(k.startswith("situate.resources.errors.") for k in errs), sorted(errs)
    missing = [k for k, c in errs.items() if not issubclass(c, situate.SituateError)]
    assert missing == []


def test_built_in_bases_kept_and_one_clause_catches():
    assert issubclass(errors.DocumentError, ValueError)
    assert issubclass(errors.TooLarge, OSError) and issubclass(errors.StoreUnavailable, OSError)
    assert issubclass(errors.ContextExceeded, errors.ServerError)
    assert issubclass(errors.StartupError, RuntimeError)
    with pytest.raises(situate.SituateError) as info:
        raise errors.TooLarge(10, 5)
    assert str(info.value) == "too large (10 bytes > 5)" and info.value.size == 10
    # the raising modules still export their classes: the same objects
    from situate.pipelines.operations import QueryError
    from situate.resources.documents.reading import DocumentError

    assert DocumentError is errors.DocumentError and QueryError is situate.QueryError


def test_a_real_refusal_is_caught_by_the_base(tmp_path):
    """A real error raised by situate's code, not constructed here: a blurb file that is not gzip."""
    from situate.contextual.blurb_files import read

    bad = tmp_path / "blurbs.jsonl.gz"
    bad.write_bytes(b"not gzip at all")
    with pytest.raises(situate.SituateError, match="blurbs.jsonl.gz"):
        read(bad)
