"""datapaths and normalization_errors: the guarantee holds, its twin breaks it."""

from __future__ import annotations

import torch

from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.surgery.approx import datapaths, normalization_errors


def test_guaranteed_datapaths_normalize_and_their_twins_do_not():
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(d_model=32, n_layers=2, n_heads=2, context=16)).eval()
    x = torch.randint(0, 256, (2, 16))
    errors = {}
    for name, (sm, ln) in datapaths(5).items():
        errors[name] = normalization_errors(model, x, softmax_kwargs=sm, layernorm_kwargs=ln)
    assert errors["guaranteed"]["max_sum_error"] < 1e-6
    assert errors["guaranteed"]["max_sigma_error"] < 1.1 * 3 * 2.0**-12 / 8
    assert errors["default"]["max_sum_error"] < 1e-6
    assert errors["default"]["max_sigma_error"] < 1e-5
    assert errors["unguaranteed"]["max_sum_error"] > 1e-3
    assert errors["unguaranteed"]["max_sigma_error"] > 1e-3
    assert (
        errors["unguaranteed-fixed8"]["max_sum_error"]
        > errors["guaranteed-fixed8"]["max_sum_error"]
    )
    assert model.blocks[0].norm1.__class__.__name__ == "LayerNorm"  # the model is not changed


def test_datapaths_differ_only_in_the_guarantee_step():
    paths = datapaths(4)
    for twin in ("", "-fixed8"):
        (gs, gl), (us, ul) = paths[f"guaranteed{twin}"], paths[f"unguaranteed{twin}"]
        assert {k: v for k, v in us.items() if k != "guarantee"} == gs and us["guarantee"] is False
        assert {k: v for k, v in ul.items() if k != "renormalize"} == gl
        assert ul["renormalize"] is False
    assert paths["guaranteed"][0]["table_bits"] == 4
