"""The registry: lookup, creation, listing and its errors."""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest
import torch

import normlab
from normlab import Method, register
from normlab.layers import RMSNorm


def test_lookup_ignores_case_dashes_and_underscores():
    assert normlab.get("RMS_Norm").name == "rmsnorm"
    assert normlab.get("clipped_softmax").name == "clipped-softmax"
    assert normlab.get("LN") is normlab.get("layernorm")


def test_create_passes_arguments():
    norm = normlab.create("rmsnorm", 16, eps=1e-6)
    assert isinstance(norm, RMSNorm) and norm.eps == 1e-6 and norm.normalized_shape == (16,)


def test_unknown_name_suggests_close_matches():
    with pytest.raises(KeyError, match="Closest: rmsnorm"):
        normlab.get("rmsnrom")


def test_duplicate_registration_raises():
    with pytest.raises(ValueError, match="already taken"):
        register(Method("rmsnorm", "norm", RMSNorm, "p", "s"))
    with pytest.raises(ValueError, match="already taken"):
        register(Method("fresh-name", "norm", RMSNorm, "p", "s", aliases=("ln",)))


def test_method_record_validates_fields():
    with pytest.raises(ValueError, match="kind"):
        Method("x", "nonsense", RMSNorm, "p", "s")
    with pytest.raises(ValueError, match="lowercase"):
        Method("Upper", "norm", RMSNorm, "p", "s")


def test_methods_are_sorted_and_filtered_by_kind():
    scores = normlab.methods(kind="score")
    assert scores and all(m.kind == "score" for m in scores)
    assert [m.name for m in scores] == sorted(m.name for m in scores)
    with pytest.raises(ValueError, match="Unknown kind"):
        normlab.methods(kind="nonsense")


def test_every_method_cites_a_paper_and_builds():
    for method in normlab.methods():
        assert method.paper and method.summary, method.name
        if method.kind == "norm":
            assert isinstance(method.create(8), torch.nn.Module), method.name


def test_presets_are_partials_not_subclasses():
    preset = normlab.get("dyt-regime")
    assert isinstance(preset.builder, functools.partial)
    assert preset.create(4).alpha.item() == 2.0


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )


def test_registry_does_not_depend_on_installed_extras():
    # The same names are registered without the optional 'entmax' package; using the
    # method then raises with the install hint.
    code = (
        "import sys; sys.modules['entmax'] = None\n"
        "import torch, normlab\n"
        "names = sorted(m.name for m in normlab.methods())\n"
        "assert 'entmax15' in names, names\n"
        "try:\n"
        "    normlab.create('entmax15')(torch.zeros(2, 3))\n"
        "except ImportError as err:\n"
        "    assert 'pip install entmax' in str(err), err\n"
        "else:\n"
        "    raise SystemExit('no ImportError')\n"
        "print(len(names))\n"
    )
    blocked = _run(code)
    assert blocked.returncode == 0, blocked.stderr
    full = _run("import normlab; print(len(normlab.methods()))")
    assert full.returncode == 0, full.stderr
    assert blocked.stdout.strip() == full.stdout.strip()
