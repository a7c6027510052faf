"""DyT is credited to the paper that introduced it; the regime preset to the regime study."""

from __future__ import annotations

import normlab
from normlab.papers import paper


def test_dyt_cites_its_original_paper_and_the_preset_the_regime_study():
    assert normlab.get("dyt").paper == paper("dyt-original")
    assert "Transformers without Normalization" in normlab.get("dyt").paper
    assert normlab.get("dyt-regime").paper == paper("dyt")
