"""Every public module's ``__all__`` matches what it serves: each listed name resolves and
shows in ``dir()``, and each public class, function or family submodule it defines is listed."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import types
from pathlib import Path

import pytest

import normlab


def _public_modules() -> list[str]:
    names = ["normlab"]
    for info in pkgutil.walk_packages(normlab.__path__, "normlab."):
        parts = info.name.split(".")
        if any(p.startswith("_") for p in parts[1:]) or "catalogue" in parts or "cli" in parts:
            continue
        names.append(info.name)
    return names


MODULES = _public_modules()


def _imported_submodules(module: types.ModuleType) -> set[str]:
    """Submodules a package's __init__ imports by name (``from pkg import sub``); those
    the import machinery binds on its own are not part of what the package serves."""
    path = getattr(module, "__file__", "") or ""
    if not path.endswith("__init__.py"):
        return set()
    out = set()
    for node in ast.parse(Path(path).read_text()).body:  # module level only
        if isinstance(node, ast.ImportFrom) and (
            node.module == module.__name__ or (node.level == 1 and node.module is None)
        ):
            out.update(alias.asname or alias.name for alias in node.names)
    return out


@pytest.mark.parametrize("name", MODULES)
def test_all_matches_what_the_module_serves(name):
    module = importlib.import_module(name)
    listed = getattr(module, "__all__", None)
    assert listed is not None, f"{name} has no __all__"
    assert len(set(listed)) == len(listed), f"{name}.__all__ repeats names"
    missing = [n for n in listed if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ lists {missing}, which it does not serve"
    hidden = [n for n in listed if n not in dir(module)]
    assert not hidden, f"dir({name}) does not show {hidden} (add __dir__)"
    unlisted = []
    explicit = _imported_submodules(module)
    for attr, value in vars(module).items():
        if attr.startswith("_"):
            continue
        defined_here = (inspect.isclass(value) or inspect.isfunction(value)) and (
            getattr(value, "__module__", None) == name
        )
        submodule = isinstance(value, types.ModuleType) and attr in explicit
        if (defined_here or submodule) and attr not in listed:
            unlisted.append(attr)
    assert not unlisted, f"{name} serves {unlisted} but its __all__ leaves them out"
