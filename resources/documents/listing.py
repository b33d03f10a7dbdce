"""Which files of a folder are the project, as git sees it: the list discovery reads.

In a git working tree the files are what git tracks plus the untracked files it does not ignore,
read from git itself (``git ls-files --cached --others --exclude-standard``: nested
``.gitignore`` files, negations, ``.git/info/exclude`` and the global excludes file, exactly as git
applies them).  Outside git, the folder's own ``.gitignore`` files are applied by git too, through a
temporary empty repository whose work tree is the folder.  Where no ``git`` program is found, the
``.gitignore`` files are matched by ``pathspec`` (a library that implements git's wildmatch rules),
and the listing says so.

On top of what git lists:

* ``.situateignore`` files (the same syntax, nested like ``.gitignore``) and the ``exclude``
  globs (:class:`ListingRules`) narrow it; ``include`` globs widen it, taking back files that git
  ignores or that are hidden (never ``.git/``, nor a file that often holds secrets:
  :data:`SECRET_NAMES`).
* Tool folders (:data:`TOOL_DIRS`), any folder holding a virtualenv's ``pyvenv.cfg`` and
  situate's own data folders (their marker file) are never read.
* A hidden file or folder (a name starting with ``.``) is read when git tracks it (a project's
  ``.github/workflows``), or when it lies in a folder of :data:`PROJECT_DOT_FOLDERS`; other hidden
  names are skipped.
* Files that ``.gitattributes`` marks ``linguist-generated`` or ``linguist-vendored`` (GitHub's
  linguist) are named in :attr:`Listing.generated`: indexed with their structural context and no
  LLM call, or skipped (:attr:`ListingRules.generated`).

Each file left out is named in :attr:`Listing.skipped` with its reason (an ignored folder once,
as ``htmlcov/``, the way ``git status --ignored`` shows it).

Examples
--------
>>> import pathlib, tempfile
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> _ = (root / ".gitignore").write_text("htmlcov/\\n")
>>> (root / "htmlcov").mkdir(); _ = (root / "htmlcov" / "index.html").write_text("<p>report</p>")
>>> _ = (root / "guide.md").write_text("# Guide")
>>> listing = list_project(root)
>>> listing.files
['guide.md']
>>> listing.skipped["htmlcov/"]
'ignored (.gitignore)'
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path, PurePosixPath

from situate.resources.errors import ListingError

#: Folders never read, whatever git says: version control, dependency and tool caches, virtualenvs
#: and situate's own data folder (a project that forgot to ignore them still has none of its text
#: in them).
TOOL_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        "node_modules",
        ".venv",
        "venv",
        ".situate",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
    }
)
#: Hidden folders that hold a project's own text (CI workflows, issue templates, dev containers):
#: read outside git too, unless ignored.  In a git working tree any tracked hidden file is read.
PROJECT_DOT_FOLDERS = frozenset({".github", ".gitlab", ".circleci", ".devcontainer", ".gitea", ".forgejo"})
#: File names that often hold credentials (dotenv files, package registries' and netrc tokens, SSH
#: private keys, the AWS CLI's ``credentials``):
#: never read, even when git tracks them or an include glob names them.  A dotenv template
#: (``.env.example``, ``.env.sample``, ``.env.template``, ``.env.dist``) is read like any hidden file.
SECRET_NAMES = frozenset(
    {
        ".env",
        ".netrc",
        ".pypirc",
        ".npmrc",
        ".git-credentials",
        ".htpasswd",
        ".pgpass",
        "id_rsa",
        "id_dsa",
        "id_ecdsa",
        "id_ed25519",
        "credentials",
    }
)
_ENV_TEMPLATES = (".example", ".sample", ".template", ".dist")
#: The ignore file situate reads besides ``.gitignore`` (gitignore syntax, nested the same way).
SITUATE_IGNORE = ".situateignore"
#: A virtualenv's marker file (PEP 405): a folder holding it is an environment, not the project.
VENV_MARKER = "pyvenv.cfg"
#: Seconds one ``git`` command may take before the listing gives up on git (a listing of a very
#: large tree takes seconds; a hung network file system must not hang a sensor).
GIT_TIMEOUT_S = 300
#: Deepest nesting of git repositories followed (a submodule, or a repository inside the folder).
MAX_NESTED_REPOS = 8
#: Values of :attr:`ListingRules.generated`.
GENERATED_CHOICES = ("index", "skip")


@dataclasses.dataclass(frozen=True)
class ListingRules:
    """What a user adds to git's view of the project.

    Attributes
    ----------
    include : tuple of str
        gitignore-syntax globs, relative to the docs folder, of files to read even where git ignores
        them or they are hidden (``docs/_build/html/**``, ``.config/*.md``).
    exclude : tuple of str
        gitignore-syntax globs of files not to read (``tests/``, ``*.csv``); wins over ``include``.
    generated : str
        ``index`` (default): files ``.gitattributes`` marks ``linguist-generated`` or
        ``linguist-vendored`` are indexed with no LLM call; ``skip``: they are not read.
    use_git : bool
        Read ignore rules through the ``git`` program when one is found (False: ``pathspec`` only,
        for tests of the fallback).
    """

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    generated: str = "index"
    use_git: bool = True

    def __post_init__(self):
        if self.generated not in GENERATED_CHOICES:
            raise ValueError(f"generated={self.generated!r}: one of {', '.join(GENERATED_CHOICES)}")


@dataclasses.dataclass
class Listing:
    """The files of a folder to read, and what was left out.

    Attributes
    ----------
    files : list of str
        POSIX paths relative to the folder, sorted; each an existing regular file (not a link).
    skipped : dict of str to str
        Path (a folder ends with ``/``) → why it is not read: ``ignored (.gitignore)``,
        ``ignored (.situateignore)``, ``excluded (exclude setting)``, ``hidden``, ``tool folder``,
        ``virtualenv``, ``situate data folder``, ``may hold secrets``, ``symbolic link``,
        ``generated (linguist-generated)``...
    generated : dict of str to str
        Path of a listed file → ``linguist-generated`` or ``linguist-vendored``.
    how : str
        How the listing was made, for a person (``git working tree``, ``folder, .gitignore files
        read by git``, ``folder, .gitignore files read by pathspec (no git program found)``).
    """

    files: list[str]
    skipped: dict[str, str]
    generated: dict[str, str]
    how: str


def list_project(root: str | Path, rules: ListingRules | None = None) -> Listing:
    """The files of ``root`` that are the project (see the module's description).

    Parameters
    ----------
    root : str or Path
        A folder.
    rules : ListingRules, optional
        Include and exclude globs and the handling of generated files (default: none, ``index``).

    Returns
    -------
    Listing

    Raises
    ------
    ListingError
        ``git`` failed or timed out on a folder it should list.
    NotADirectoryError
        ``root`` is not a folder.
    """
    root = Path(root).resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a folder")
    rules = rules or ListingRules()
    skipped: dict[str, str] = {}
    candidates, tracked, how = _git_candidates(root, rules, skipped, depth=0)
    files, generated = _apply_rules(root, candidates, tracked, rules, skipped)
    return Listing(sorted(files), dict(sorted(skipped.items())), generated, how)


# -- what git lists --------------------------------------------------------------------------------
def git_program() -> str | None:
    """The ``git`` program on ``PATH``, or None."""
    return shutil.which("git")


def _git(args: Sequence[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    """``git args`` in ``cwd``, NUL-separated output as bytes.  The caller's ``GIT_DIR`` and the like
    are not inherited (a hook's environment would point git elsewhere); ``core.fsmonitor`` is off
    (a repository's configuration must not start a program here).

    Raises
    ------
    ListingError
        ``check`` and git exited non-zero, or it ran over :data:`GIT_TIMEOUT_S`.
    """
    try:
        done = subprocess.run(
            git_command(args), cwd=cwd, env=git_env(), capture_output=True, timeout=GIT_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise ListingError(f"{cwd}: `git {args[0]}` took over {GIT_TIMEOUT_S} s") from None
    except OSError as e:  # the folder cannot be entered (permissions), or git cannot start
        raise ListingError(f"{cwd}: cannot run git there ({e.strerror or e})") from None
    if check and done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ListingError(f"{cwd}: `git {' '.join(args[:2])}` failed: {said[-1] if said else done.returncode}")
    return done


def git_env() -> dict[str, str]:
    """This process's environment less git's own variables (``GIT_DIR``, ``GIT_WORK_TREE``...: a
    hook's environment would point git elsewhere), with no optional lock taken and C messages."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return env | {"GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}


def git_command(args: Sequence[str]) -> list[str]:
    """``git`` with ``args``, its configuration made safe for a listing: ``core.fsmonitor`` off (a
    repository's configuration must not start a program here) and every folder a safe directory (a
    checkout owned by another user, as in a container's bind mount, is listed as git sees it; the
    commands run here only read the index, the ignore files and the attributes)."""
    safe = ["-c", "core.fsmonitor=false", "-c", "core.quotePath=false", "-c", "safe.directory=*"]
    return [git_program() or "git", *safe, *args]


def _paths(out: bytes) -> list[str]:
    """NUL-separated paths from git, as text (a name that is not UTF-8 keeps its bytes as
    surrogates, so that the file can still be opened and then named)."""
    return [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]


def _work_tree_of(root: Path) -> bool:
    """Whether git takes ``root`` as part of a working tree in which ``root`` itself is not ignored
    (a folder such as ``build/html`` that its repository ignores is listed as a folder of its own)."""
    inside = _git(["rev-parse", "--is-inside-work-tree"], root, check=False)
    if inside.returncode != 0 or inside.stdout.strip() != b"true":
        return False
    if _git(["rev-parse", "--is-inside-git-dir"], root, check=False).stdout.strip() == b"true":
        return False
    return _git(["check-ignore", "-q", "."], root, check=False).returncode != 0


@contextlib.contextmanager
def git_view(root: Path) -> Iterator[list[str]]:
    """The arguments that make git read ``root`` with its ignore files and attributes: none in a
    working tree (:func:`_work_tree_of`), else ``--git-dir`` of a temporary empty bare repository
    (removed on exit) and ``--work-tree=root``.

    Raises
    ------
    ListingError
        ``git init`` of the temporary repository failed.
    """
    if _work_tree_of(root):
        yield []
        return
    tmp = tempfile.mkdtemp(prefix="situate-git-")
    try:
        _git(["init", "-q", "--bare", tmp], root)
        yield [f"--git-dir={tmp}", f"--work-tree={root}"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _git_candidates(
    root: Path, rules: ListingRules, skipped: dict, depth: int, prefix: str = ""
) -> tuple[list[str], set[str], str]:
    """``(candidate paths, tracked paths, how)`` of ``root``: git's list, or a walk without git.
    Ignored files and folders go to ``skipped``; nested repositories are listed in turn.
    ``prefix``: where ``root`` lies under the docs folder (``inner/``), for the include globs."""
    if not rules.use_git or git_program() is None:
        files = _walk_with_pathspec(root, ".gitignore", skipped)
        why = "no git program found" if rules.use_git else "git not used"
        return files, set(), f"folder, .gitignore files read by pathspec ({why})"
    with git_view(root) as base:
        how = "folder, .gitignore files read by git" if base else "git working tree"
        tracked = set(_paths(_git([*base, "ls-files", "-z", "--cached"], root).stdout))
        others = _paths(_git([*base, "ls-files", "-z", "--others", "--exclude-standard"], root).stdout)
        ignored = _paths(
            _git([*base, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"], root).stdout
        )
        wanted_ignored = _ignored_files(root, base, rules, prefix) if rules.include else []
    for path in ignored:
        skipped[path] = "ignored (.gitignore)"
    files: list[str] = []
    for path in sorted((tracked | set(others)) - {"./", "."}):  # "./": inside a submodule not checked out
        if not _is_repo_dir(root, path):
            files.append(path)
            continue
        inner_files, inner_tracked = _nested_repo(root, path, rules, skipped, depth)
        files += inner_files
        tracked |= inner_tracked
    return files + wanted_ignored, tracked, how


def _ignored_files(root: Path, base: list[str], rules: ListingRules, prefix: str) -> list[str]:
    """Every file git ignores under ``root`` that an include glob names, matched as the path under
    the docs folder (``prefix`` + the path; only asked for when the rules have include globs: the
    list holds every file of an ignored virtualenv)."""
    spec = Patterns(rules.include)
    out = _git([*base, "ls-files", "-z", "--others", "--ignored", "--exclude-standard"], root).stdout
    return [p for p in _paths(out) if spec.matches(prefix + p)]


def _is_repo_dir(root: Path, path: str) -> bool:
    """Whether a path git lists is a folder: a submodule (``--cached``) or a repository inside the
    folder (``--others`` lists it as ``name/``)."""
    return path.endswith("/") or (root / path).is_dir() and not (root / path).is_symlink()


def _nested_repo(root: Path, path: str, rules: ListingRules, skipped: dict, depth: int) -> tuple[list[str], set[str]]:
    """The files and tracked files of a repository nested at ``path``, as paths under ``root``
    (none for a submodule that is not checked out, a tool folder, or nesting past
    :data:`MAX_NESTED_REPOS`: each named in ``skipped``)."""
    path = path.rstrip("/")
    why = (
        "repositories nested too deep"
        if depth >= MAX_NESTED_REPOS
        else "tool folder"
        if any(p in TOOL_DIRS for p in PurePosixPath(path).parts)
        else "submodule not checked out"
        if not (root / path / ".git").exists()
        else None
    )
    if why:
        skipped[path + "/"] = why
        return [], set()
    inner: dict[str, str] = {}
    files, tracked, _ = _git_candidates(root / path, rules, inner, depth + 1, f"{path}/")
    skipped.update({f"{path}/{k}": v for k, v in inner.items()})
    return [f"{path}/{f}" for f in files], {f"{path}/{f}" for f in tracked}


# -- without git: pathspec over the ignore files ------------------------------------------------
class Patterns:
    """gitignore-syntax lines, matched as git matches them (``pathspec``'s ``gitignore`` patterns).

    A pattern that ends in ``/`` matches folders only: it is left out when a file itself is
    checked, so that it acts on the files below a folder only through the folder (pathspec would
    also match them directly, and ``*`` / ``!*/`` / ``!*.md`` would keep every file).

    Parameters
    ----------
    lines : iterable of str
        The lines of an ignore file, or globs.
    """

    def __init__(self, lines: Iterable[str]):
        import pathspec

        lines = list(lines)
        self.folders = pathspec.PathSpec.from_lines("gitignore", lines)
        self.files = pathspec.PathSpec.from_lines("gitignore", [x for x in lines if not _folder_only(x)])

    def check(self, path: str, is_dir: bool = False) -> bool | None:
        """True (matched), False (matched by a negation) or None (no line matches) for ``path``
        alone, its folders not checked."""
        if is_dir:
            return self.folders.check_file(path + "/").include
        return self.files.check_file(path).include

    def matches(self, path: str) -> bool:
        """Whether ``path`` or one of its folders is matched, with git's rule that a file inside a
        matched folder cannot be taken back by a later negation."""
        parts = PurePosixPath(path).parts
        return any(self.check("/".join(parts[:i]), True) for i in range(1, len(parts))) or bool(self.check(path))


def _folder_only(line: str) -> bool:
    """Whether a gitignore line is a pattern of folders only (ends in ``/``; not a comment)."""
    text = line.rstrip(" \t\r\n")
    return text.endswith("/") and not text.startswith("#")


class IgnoreFiles:
    """The ignore files of one name (``.gitignore``, ``.situateignore``) under a folder, each
    applying to the paths below its own folder, the deepest file's last matching line deciding
    (git's order), read once per folder.

    Parameters
    ----------
    root : Path
        The folder; ignore files above it are not read.
    name : str
        The ignore file's name.
    """

    def __init__(self, root: Path, name: str):
        self.root, self.name, self._specs = root, name, {}

    def _spec_in(self, folder: str):
        if folder not in self._specs:
            path = self.root / folder / self.name
            try:
                text = path.read_text("utf-8-sig", "replace") if path.is_file() and not path.is_symlink() else ""
            except OSError:
                text = ""
            self._specs[folder] = Patterns(text.splitlines()) if text.strip() else None
        return self._specs[folder]

    def ignored(self, path: str, is_dir: bool = False) -> bool:
        """Whether ``path`` (relative, POSIX) is ignored by the files themselves (its folders are
        checked by the caller, as git stops at an ignored folder)."""
        parts = PurePosixPath(path).parts
        for cut in range(len(parts) - 1, -1, -1):
            spec = self._spec_in("/".join(parts[:cut]))
            if spec is None:
                continue
            result = spec.check("/".join(parts[cut:]), is_dir)
            if result is not None:
                return result
        return False

    def ignored_path(self, path: str) -> bool:
        """Whether ``path`` or any folder above it is ignored."""
        parts = PurePosixPath(path).parts
        folders = ("/".join(parts[: i + 1]) for i in range(len(parts) - 1))
        return any(self.ignored(f, True) for f in folders) or self.ignored(path)


def _walk_with_pathspec(root: Path, name: str, skipped: dict) -> list[str]:
    """Every file under ``root`` that the ``name`` ignore files leave, walking top-down and not
    entering an ignored folder, a tool folder or ``.git``."""
    rules = IgnoreFiles(root, name)
    out: list[str] = []
    for folder, dirs, files in os.walk(root):
        rel = Path(folder).relative_to(root).as_posix()
        rel = "" if rel == "." else rel + "/"
        keep = []
        for d in sorted(dirs):
            if d in TOOL_DIRS:
                skipped[rel + d + "/"] = "tool folder"
            elif rules.ignored(rel + d, is_dir=True):
                skipped[rel + d + "/"] = f"ignored ({name})"
            else:
                keep.append(d)
        dirs[:] = keep
        for f in sorted(files):
            if rules.ignored(rel + f):
                skipped[rel + f] = f"ignored ({name})"
            else:
                out.append(rel + f)
    return out


# -- situate's own rules -------------------------------------------------------------------------
def _apply_rules(
    root: Path, candidates: list[str], tracked: set[str], rules: ListingRules, skipped: dict
) -> tuple[list[str], dict[str, str]]:
    """``(files, generated)``: the candidates that pass situate's rules; the others to ``skipped``."""
    from situate.resources.store.store import DATA_MARKER

    situate_ignore = IgnoreFiles(root, SITUATE_IGNORE)
    include, exclude = Patterns(rules.include), Patterns(rules.exclude)
    kinds = _FolderKinds(root, DATA_MARKER)
    kept: list[str] = []
    for path in dict.fromkeys(candidates):
        why = _why_not(path, tracked, include, exclude, situate_ignore, kinds)
        if why is None and (root / path).is_symlink():
            why = "symbolic link"
        elif why is None and not _regular_file(root / path):
            continue  # gone since git listed it (a tracked file deleted in the working tree)
        if why is None:
            kept.append(path)
        else:
            skipped.setdefault(kinds.top_folder_of(path, why) or path, why)
    generated = linguist_marks(root, kept) if rules.use_git and git_program() and kept else {}
    if rules.generated == "skip":
        for path, mark in generated.items():
            skipped[path] = f"generated ({mark})"
        kept = [p for p in kept if p not in generated]
        generated = {}
    return kept, generated


def _why_not(path: str, tracked: set[str], include, exclude, situate_ignore: IgnoreFiles, kinds) -> str | None:
    """Why situate's rules leave ``path`` out, or None."""
    parts = PurePosixPath(path).parts
    name = parts[-1]
    if ".git" in parts or is_secret_name(name):
        return "may hold secrets" if ".git" not in parts else "tool folder"
    if exclude.matches(path):
        return "excluded (exclude setting)"
    if situate_ignore.ignored_path(path):
        return f"ignored ({SITUATE_IGNORE})"
    if any(p in TOOL_DIRS for p in parts[:-1]):
        return "tool folder"
    folder_kind = kinds.of(parts[:-1])
    if folder_kind:
        return folder_kind
    if include.matches(path):
        return None
    if any(p.startswith(".") for p in parts) and path not in tracked and parts[0] not in PROJECT_DOT_FOLDERS:
        return "hidden"
    return None


def is_secret_name(name: str) -> bool:
    """Whether a file name is one that often holds credentials (:data:`SECRET_NAMES`, or a dotenv
    file ``.env.<stage>`` other than a template).

    >>> is_secret_name(".env.production"), is_secret_name(".env.example"), is_secret_name("env.md")
    (True, False, False)
    """
    lower = name.lower()
    if lower in SECRET_NAMES:
        return True
    return lower.startswith(".env.") and not lower.endswith(_ENV_TEMPLATES)


def _regular_file(path: Path) -> bool:
    try:
        return path.is_file() and not path.is_symlink()
    except OSError:
        return False


class _FolderKinds:
    """Folders that are not the project: a virtualenv (its ``pyvenv.cfg``) or a situate data folder
    (its marker file), each folder looked at once."""

    def __init__(self, root: Path, data_marker: str):
        self.root, self.data_marker, self._seen = root, data_marker, {}

    def _kind(self, folder: str) -> str | None:
        if folder not in self._seen:
            here = self.root / folder
            self._seen[folder] = (
                "virtualenv"
                if (here / VENV_MARKER).is_file()
                else "situate data folder"
                if (here / self.data_marker).is_file()
                else None
            )
        return self._seen[folder]

    def of(self, folders: tuple[str, ...]) -> str | None:
        """The kind of the outermost such folder among ``folders`` (a path's folders), or None."""
        return next((k for i in range(len(folders)) if (k := self._kind("/".join(folders[: i + 1])))), None)

    def top_folder_of(self, path: str, why: str) -> str | None:
        """The folder named for a whole folder left out (``.venv/``), so that its thousands of
        files are one entry; None for a reason that is the file's own."""
        parts = PurePosixPath(path).parts[:-1]
        if why in ("virtualenv", "situate data folder"):
            i = next(i for i in range(len(parts)) if self._kind("/".join(parts[: i + 1])))
            return "/".join(parts[: i + 1]) + "/"
        if why == "tool folder":
            i = next((i for i, p in enumerate(parts) if p in TOOL_DIRS or p == ".git"), None)
            return "/".join(parts[: i + 1]) + "/" if i is not None else None
        if why == "hidden":
            i = next((i for i, p in enumerate(parts) if p.startswith(".")), None)
            return "/".join(parts[: i + 1]) + "/" if i is not None else None
        return None


def linguist_marks(root: Path, paths: Sequence[str]) -> dict[str, str]:
    """The files among ``paths`` that ``.gitattributes`` marks ``linguist-generated`` or
    ``linguist-vendored`` (set, or ``true``), read by ``git check-attr`` (a temporary repository
    outside git), as path → the attribute.

    Raises
    ------
    ListingError
        git failed.
    """
    with git_view(root) as base:
        cmd = [*base, "check-attr", "-z", "--stdin", "linguist-generated", "linguist-vendored"]
        done = subprocess.run(
            git_command(cmd),
            cwd=root,
            env=git_env(),
            input=b"\0".join(p.encode("utf-8", "surrogateescape") for p in paths) + b"\0",
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    if done.returncode != 0:
        raise ListingError(f"{root}: `git check-attr` failed: {done.stderr.decode('utf-8', 'replace').strip()}")
    fields = [f.decode("utf-8", "surrogateescape") for f in done.stdout.split(b"\0")[:-1]]  # values may be empty
    marks: dict[str, str] = {}
    for i in range(0, len(fields) - 2, 3):
        path, attr, value = fields[i : i + 3]
        if value in ("set", "true"):
            marks.setdefault(path, attr)
    return marks


# -- one path, for a key that comes back from Dagster --------------------------------------------
_CACHE: dict[tuple[str, ListingRules], tuple[float, Listing]] = {}
#: Seconds a listing is reused to admit the documents of one run (a run resolves each of its
#: documents: one listing a run, not one a document).
CACHE_SECONDS = 600.0


def cached_listing(root: Path, rules: ListingRules | None = None) -> Listing:
    """:func:`list_project` of ``root``, reused for :data:`CACHE_SECONDS`."""
    rules = rules or ListingRules()
    hit = _CACHE.get((str(root), rules))
    if hit is None or time.monotonic() - hit[0] > CACHE_SECONDS:
        return fresh_listing(root, rules)
    return hit[1]


def fresh_listing(root: Path, rules: ListingRules | None = None) -> Listing:
    """:func:`list_project` of ``root`` now (a discovery of the folder's documents must see its
    files as they are), kept for :func:`cached_listing`: what the same process asks of the folder
    next (how it was listed, a key's file) reads it again only after :data:`CACHE_SECONDS`."""
    rules = rules or ListingRules()
    listing = list_project(root, rules)
    _CACHE[(str(root), rules)] = (time.monotonic(), listing)
    return listing
