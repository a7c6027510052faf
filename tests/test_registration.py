"""Every module that registers a method is imported by ``import normlab`` (a new family
module that calls ``register`` but is never imported would silently stay out of the
registry)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "normlab"


def _registers(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name == "register" and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Call) and getattr(arg.func, "id", "") == "Method":
                    return True
    return False


def _registering_modules() -> list[str]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        if _registers(ast.parse(path.read_text(), filename=str(path))):
            parts = path.relative_to(SRC.parent).with_suffix("").parts
            out.append(".".join(p for p in parts if p != "__init__"))
    return out


@pytest.mark.slow
def test_every_registering_module_is_imported_by_the_package():
    modules = _registering_modules()
    assert len(modules) >= 15  # the scan finds the families' modules
    code = "import json, sys, normlab; print(json.dumps(sorted(sys.modules)))"
    loaded = set(
        json.loads(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True
            ).stdout
        )
    )
    missing = [m for m in modules if m not in loaded]
    assert not missing, (
        f"{missing} call register() but `import normlab` never imports them: import each "
        "from its family's __init__.py"
    )
