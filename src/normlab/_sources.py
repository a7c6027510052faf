"""The source closure of a module: every normlab module it imports, directly or not.

Cache keys (claims' tasks, trained models) hash this closure, so editing any normlab code a
result depends on, however indirectly, invalidates the result, with no version to bump by
hand. The closure is found statically: every ``import`` and ``from ... import`` statement
of a module's source (including those inside functions) that names a normlab module is
resolved to its file under the package, and followed. ``from normlab.a import b`` adds
``normlab.a.b`` when ``b`` is a submodule and ``normlab.a`` when it is not (an attribute of
the package). The compiled sources a module builds at run time (``csrc/`` beside it: the
CPU kernels' C++) are hashed with it. Parent packages that are
only executed implicitly (``normlab/a/__init__.py`` for ``import normlab.a.b``) are not
added; name them in an import to depend on them.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path

__all__ = ["closure_hash", "module_file", "read_source", "source_closure"]

_ROOT = Path(__file__).resolve().parent
_PACKAGE = "normlab"
_PARSED: dict[tuple[str, str], frozenset[str]] = {}


def read_source(path: Path) -> bytes:
    """The bytes of a source file (tests replace this to simulate an edit)."""
    return Path(path).read_bytes()


def module_file(name: str) -> Path | None:
    """The file of normlab module ``name`` (``.py`` or a package's ``__init__.py``), or None
    when ``name`` is not a normlab module."""
    if name != _PACKAGE and not name.startswith(_PACKAGE + "."):
        return None
    parts = name.split(".")[1:]
    base = _ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _imports(name: str, path: Path, source: bytes) -> set[str]:
    """The normlab modules named by the import statements of one module."""
    tree = ast.parse(source, filename=str(path))
    found: set[str] = set()
    package = _package_of(name, path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            else:
                base = node.module or ""
            subs = {f"{base}.{alias.name}" for alias in node.names if alias.name != "*"}
            subs = {m for m in subs if module_file(m) is not None}
            # ``from normlab import functional`` depends on the submodule, not on every
            # module the package's __init__ happens to import; a name that is not a
            # submodule is an attribute of the package, which is then a dependency.
            if len(subs) < len(node.names) or any(a.name == "*" for a in node.names):
                found.add(base)
            found.update(subs)
    return {m for m in found if module_file(m) is not None}


def _any_module_file(name: str) -> Path | None:
    """The file of an importable module outside normlab (a claim defined elsewhere)."""
    module = sys.modules.get(name)
    origin = getattr(module, "__file__", None)
    if origin is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
        origin = spec.origin if spec is not None else None
    if origin is None or not origin.endswith(".py"):
        return None
    return Path(origin)


#: Suffixes of compiled sources a module may build at run time (its kernels).
NATIVE_SUFFIXES = (".c", ".cc", ".cpp", ".h", ".hpp", ".cu", ".cuh")


def _native_sources(path: Path) -> list[Path]:
    """The compiled sources beside a module that builds them: files with
    :data:`NATIVE_SUFFIXES` under a ``csrc`` folder next to the module file."""
    folder = path.parent / "csrc"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*") if p.suffix in NATIVE_SUFFIXES and p.is_file())


def source_closure(modules: Iterable[str]) -> dict[str, str]:
    """Module name -> sha256 of its source, for ``modules`` and every normlab module they
    import, directly or transitively. A module of ``modules`` outside normlab (a claim
    defined in a user's or a test's module) is hashed too, and its normlab imports are
    followed; built-in and compiled modules are ignored."""
    files = {m: module_file(m) or _any_module_file(m) for m in modules}
    todo = [m for m, f in files.items() if f is not None]
    digests: dict[str, str] = {}
    while todo:
        name = todo.pop()
        if name in digests:
            continue
        path = files.get(name) or module_file(name)
        assert path is not None
        source = read_source(path)
        digest = hashlib.sha256(source).hexdigest()
        digests[name] = digest
        for native in _native_sources(path):
            digests[f"{name}:{native.name}"] = hashlib.sha256(read_source(native)).hexdigest()
        if (name, digest) not in _PARSED:  # parse each version of a file once per process
            _PARSED[name, digest] = frozenset(_imports(name, path, source))
        todo.extend(sorted(_PARSED[name, digest] - digests.keys()))
    return dict(sorted(digests.items()))


def closure_hash(modules: Iterable[str], length: int = 16) -> str:
    """One digest of :func:`source_closure` of ``modules``."""
    text = "\n".join(f"{k} {v}" for k, v in source_closure(modules).items())
    return hashlib.sha256(text.encode()).hexdigest()[:length]
