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


def test_methods_take_glob_and_substring_patterns_like_timm():
    assert [m.name for m in normlab.methods("rms*")] == ["rmsnorm"]
    softmaxes = {m.name for m in normlab.methods("*softmax*", kind="score")}
    assert {"softmax", "softmax1", "clipped-softmax"} <= softmaxes
    assert {m.name for m in normlab.methods("quad")} == {"quadnorm", "blendquadnorm"}
    both = {m.name for m in normlab.methods(["rms*", "layer*"])}
    assert both == {"rmsnorm", "layernorm"}
    assert normlab.methods("l?") == [normlab.get("layernorm")]  # its alias "ln" matches
    assert normlab.methods("norm") == normlab.methods(kind="norm")  # a kind's name is a kind
    assert normlab.methods("no-such-*") == []


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("grpo", "normlab.rl.advantages(rewards, groups, method='grpo')"),
        ("macro", "model.parameters()"),
        ("rmsnorm", "normlab.create('rmsnorm', 512)"),
    ],
)
def test_create_with_missing_arguments_says_what_to_call(name, hint):
    with pytest.raises(TypeError) as err:
        normlab.create(name)
    assert hint in str(err.value) and "its builder takes (" in str(err.value)


def test_unknown_method_hints_at_import_and_entry_points():
    with pytest.raises(KeyError) as err:
        normlab.get("my-own-norm")
    text = str(err.value)
    assert "import that module first" in text and "'normlab.methods' entry point" in text


def test_an_entry_point_registers_a_method_on_first_lookup(monkeypatch):
    import importlib.metadata
    import types

    from normlab import _registry

    module = types.ModuleType("plugin_norms_for_test")

    class Point:
        name, value = "plugin", "plugin_norms_for_test"

        def load(self):
            register(Method("plugin-norm", "norm", RMSNorm, "p", "s"))
            return module

    def entry_points(group):
        return [Point()] if group == "normlab.methods" else []

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(_registry, "_LOADED_PLUGINS", set())
    monkeypatch.setattr(_registry, "_METHODS", dict(_registry._METHODS))
    monkeypatch.setattr(_registry, "_LOOKUP", dict(_registry._LOOKUP))
    assert normlab.get("plugin_norm").name == "plugin-norm"
