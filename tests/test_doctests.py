"""The docstring examples of the layers, functionals and attention modules run and pass.

Every public class and function (``__all__``) of these modules carries an ``Examples:``
section whose ``>>>`` lines print a checked value (a shape, a property, a rounded number);
this runs them with :mod:`doctest` and checks that none is missing.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import io

import pytest

MODULES = (
    "normlab.attention.mha",
    "normlab.attention.scores",
    "normlab.functional.activations",
    "normlab.functional.approx",
    "normlab.functional.entropic",
    "normlab.functional.manifolds",
    "normlab.functional.norms",
    "normlab.functional.quadrature",
    "normlab.functional.scores",
    "normlab.functional.sparse",
    "normlab.layers.activations",
    "normlab.layers.approx",
    "normlab.layers.dyt",
    "normlab.layers.hypersphere",
    "normlab.layers.norms",
    "normlab.layers.quadrature",
    "normlab.layers.riemannian",
    "normlab.layers.scaling",
    "normlab.models.bn_mlp",
    "normlab.models.convnext",
    "normlab.probes.activations",
    "normlab.probes.dyt",
    "normlab.probes.gemm",
    "normlab.probes.kv_quant",
    "normlab.probes.numerics",
    "normlab.probes.spikes",
    "normlab.quant.peers",
    "normlab.surgery.approx",
    "normlab.training.attention_rank",
    "normlab.training.bn_linear_gd",
    "normlab.training.tale",
    "normlab.training.unlearn",
)
#: Optional packages a module's examples need.
NEEDS = {"normlab.functional.sparse": "entmax", "normlab.quant.peers": "hqq"}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _tests(name: str) -> list[doctest.DocTest]:
    """The examples of module ``name``, with those of the public names it re-exports from
    another module (named as if defined in ``name``: doctest's finder skips them)."""
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder()
    tests = finder.find(module)
    for n in module.__all__:
        obj = getattr(module, n)
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__ != name:
            tests += finder.find(obj, f"{name}.{n}")
    return [t for t in tests if t.examples]


@pytest.mark.parametrize("name", MODULES)
def test_examples_pass(name: str) -> None:
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in _tests(name):
        runner.run(test, out=out.write)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, out.getvalue()


@pytest.mark.parametrize("name", MODULES)
def test_every_public_name_has_an_example(name: str) -> None:
    module = importlib.import_module(name)
    public = [
        n
        for n in module.__all__
        if inspect.isclass(getattr(module, n)) or inspect.isfunction(getattr(module, n))
    ]
    assert public, f"{name} exports no class or function"
    documented = {t.name for t in _tests(name)}
    missing = [n for n in public if f"{name}.{n}" not in documented]
    assert not missing, f"{name}: add an Examples: section to {missing}"
