"""The import direction of shared/DESIGN.md, checked on every module's source.

``functional`` <- ``kernels`` <- method families <- ``surgery``, ``probes`` <- ``models``,
``data`` <- ``training`` <- ``claims`` <- ``cli``, with the top-level private modules
(``_registry``, ``_checks``, ``_io``, ``papers``, ...) as the base. Every import counts,
including those inside functions: a lazy import still ties the lower layer to the higher one.
The package root is checked like any module: it sits above ``models`` (``normlab.save`` and
``normlab.load`` reach the checkpoint I/O), so no library layer up to ``models`` and ``data``
may import it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "normlab"

FAMILIES = (
    "layers",
    "attention",
    "series",
    "wrappers",
    "optim",
    "rl",
    "ssl",
    "flows",
    "quant",
)
#: Layer of each top-level part of the package; a module may import only its own layer or
#: lower ones. The package root (``normlab/__init__.py``) imports every family, the
#: probes/surgery layer and (for ``save``/``load``) ``models.checkpoint``, so it sits just
#: above ``models`` and ``data``: importing it is allowed from ``training`` up.
LEVELS: dict[str, float] = {
    "functional": 1,
    "kernels": 1.5,  # fused fast paths of functional's formulas, under every family
    **dict.fromkeys(FAMILIES, 2),
    "surgery": 3,
    "probes": 3,
    "models": 4,
    "data": 4,
    "<root>": 4.25,
    "training": 4.5,
    "claims": 5,
    "compare": 5,  # the user's own comparison, on the claims engine
    "cli": 6,
    "__main__": 6,
}
#: Layers whose parts must not import each other (each is a family of its own).
SEPARATE = {2, 3}
#: Imports between two different parts of one separate layer that are legitimate: the
#: importer builds on the imported part. Keep this list short; each entry says why.
ALLOWED: dict[tuple[str, str], str] = {
    ("attention", "layers"): (
        "MultiheadAttention(normalized=True) is nGPT's attention: its projections are the "
        "hypersphere layers' NormalizedLinear and its s_qk a LearnedScale"
    ),
}
HEAVY = ("scipy", "optuna", "gymnasium", "transformers", "zuko", "triton", "ray")


def part_of(module: str) -> str:
    """The top-level part of a dotted module name inside normlab (``<root>`` for normlab)."""
    parts = module.split(".")
    assert parts[0] == "normlab", module
    if len(parts) == 1 or parts[1] == "__init__":
        return "<root>"
    return parts[1]


def level_of(part: str) -> float:
    if part in LEVELS:
        return LEVELS[part]
    if part.startswith("_") or part == "papers":  # _registry, _checks, _io, papers, ...
        return 0
    raise AssertionError(f"normlab.{part} has no layer; add it to LEVELS in this test.")


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(dotted: str) -> bool:
    path = SRC.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every normlab module ``path`` imports, at any depth."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "normlab"
            ]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "normlab":
                continue
            # ``from normlab import layers`` imports normlab.layers, not only the root
            subs = [f"{target}.{a.name}" for a in node.names if _is_module(f"{target}.{a.name}")]
            found += [(node.lineno, s) for s in subs] or [(node.lineno, target)]
    return found


MODULES = sorted(SRC.rglob("*.py"))


def violations(path: Path) -> list[str]:
    mine = part_of(module_name(path))
    out = []
    for line, target in imports(path):
        theirs = part_of(target)
        if theirs == mine:
            continue
        where = f"{path.relative_to(SRC.parent)}:{line} imports {target}"
        lo, hi = level_of(mine), level_of(theirs)
        if hi > lo:
            out.append(f"{where}: {theirs} (layer {hi}) is above {mine} (layer {lo})")
        elif hi == lo and lo in SEPARATE and (mine, theirs) not in ALLOWED:
            out.append(f"{where}: {mine} and {theirs} are separate families")
    return out


def test_every_part_has_a_layer():
    for path in MODULES:
        level_of(part_of(module_name(path)))


def test_imports_follow_the_design_direction():
    bad = [v for path in MODULES for v in violations(path)]
    assert not bad, "imports against shared/DESIGN.md's direction:\n" + "\n".join(bad)


def test_allowed_pairs_are_used_and_one_way():
    used = set()
    for path in MODULES:
        mine = part_of(module_name(path))
        used |= {(mine, part_of(t)) for _, t in imports(path)}
    assert set(ALLOWED) <= used, f"stale ALLOWED entries: {set(ALLOWED) - used}"
    assert not any((b, a) in ALLOWED for a, b in ALLOWED), "an allowed pair must be one-way"
    assert ("layers", "attention") not in used and ("layers", "attention") not in ALLOWED


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from normlab.models.gpt import TinyGPT\n", "above"),
        ("from normlab.training.fit import fit\n", "above"),
        ("def f():\n    from normlab import claims\n", "above"),
        ("from ..attention import scores\n", "separate"),
        ("import normlab\n", "above"),
        ("from normlab.functional import rms_norm\n", None),
    ],
)
def test_the_checker_catches_violations(tmp_path, monkeypatch, source, expected):
    fake = tmp_path / "normlab" / "layers" / "fake.py"
    fake.parent.mkdir(parents=True)
    fake.write_text(source)
    for sub in ("models", "training", "claims", "attention", "functional"):
        (tmp_path / "normlab" / sub).mkdir()
        (tmp_path / "normlab" / sub / "__init__.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path / "normlab")
    found = violations(fake)
    if expected is None:
        assert not found
    else:
        assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize(
    ("where", "source", "expected"),
    [
        ("__init__.py", "def f():\n    from normlab import claims\n", "above"),
        ("__init__.py", "from normlab.models import checkpoint\n", None),
        ("models/fake.py", "import normlab\n", "above"),
        ("training/fake.py", "import normlab\n", None),
    ],
)
def test_the_root_is_checked_both_ways(tmp_path, monkeypatch, where, source, expected):
    """The root's own imports are checked, and the library below it may not import it."""
    root = tmp_path / "normlab"
    for sub in ("models", "training", "claims"):
        (root / sub).mkdir(parents=True)
        (root / sub / "__init__.py").write_text("")
    (root / "models" / "checkpoint.py").write_text("")
    fake = root / where
    fake.write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "SRC", root)
    found = violations(fake)
    if expected is None:
        assert not found
    else:
        assert len(found) == 1 and expected in found[0], found


def test_import_normlab_needs_no_optional_dependency():
    code = (
        "import sys, normlab\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "", f"import normlab imported {out.stdout.strip()}"
