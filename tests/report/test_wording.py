"""What a reader is told in words: values rather than config keys, captions that describe
only the panels drawn at the report's scale."""

from __future__ import annotations

import re

import pytest

from normlab.claims.catalogue.kappa_attention import CLAIM as KAPPA
from normlab.claims.report import caption_at

SCALES = ("smoke", "quick", "full")


def _config_keys(claim) -> set[str]:
    return {k for scale in SCALES for k in claim.config(scale) if "_" in k}


def test_kappa_attention_why_line_prints_values_not_config_keys():
    keys = _config_keys(KAPPA)
    for item in (*KAPPA.effects, *KAPPA.premises):
        words = set(re.findall(r"[A-Za-z_]\w*", item.description))
        assert not words & keys, (item.name, words & keys)
    assert "(kappa = 0.2)" in KAPPA.primary.description


@pytest.mark.parametrize("scale", SCALES)
def test_kappa_attention_caption_describes_only_the_panels_drawn(scale):
    caption = caption_at(KAPPA, scale)
    # both panels (the per-seed gap, the LM curves) are drawn at every scale: the LM
    # comparison is the primary everywhere
    assert "Right" in caption and "Left" in caption
    assert "tail_distance" not in caption
