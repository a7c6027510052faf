"""normlab.rl.trl_reference: TRL's own advantage block, run on a reward matrix."""

from __future__ import annotations

import pytest
import torch

from normlab.rl import advantages

pytest.importorskip("trl", reason="trl is a peer library: pip install -e '.[peers]'")
pytestmark = pytest.mark.slow  # importing trl (transformers, accelerate) takes ~8 s

NAN = float("nan")


def test_the_issue_example_gives_trl_1_16s_numbers():
    from normlab.rl.trl_reference import trl_advantages

    r = torch.tensor([[1.0, 2.0], [NAN, NAN], [0.0, 1.0], [3.0, -1.0]], dtype=torch.float64)
    expect = torch.tensor([0.9999, 0.0, -0.9999, 0.0], dtype=torch.float64)
    torch.testing.assert_close(trl_advantages(r, 4, "grpo"), expect, atol=1e-4, rtol=0)
    torch.testing.assert_close(advantages(r, 4, method="grpo"), expect, atol=1e-4, rtol=0)


def test_normlab_matches_trl_and_a_wrong_formula_does_not(monkeypatch):
    import importlib

    adv = importlib.import_module("normlab.rl.advantages")  # the module, not the function
    from normlab.rl.trl_reference import TRL_SETTINGS, trl_mismatch

    assert trl_mismatch(tuple(TRL_SETTINGS)) <= 1e-7
    monkeypatch.setattr(adv, "advantages", lambda r, g, method: r.nansum(1) - r.nansum(1).mean())
    assert trl_mismatch(("dr-grpo",)) > 1e-3


def test_an_unknown_method_is_refused():
    from normlab.rl.trl_reference import trl_advantages

    with pytest.raises(ValueError, match="TRL has no"):
        trl_advantages(torch.zeros(4, 1), 4, "slas")
