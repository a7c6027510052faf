"""The probe page's heatmaps: whole-number layer and head ticks, and colourbars that
overlap nothing."""

from __future__ import annotations

import itertools
import math

import pytest

from normlab._html import integer_ticks
from normlab.cli import probe

#: Small matrices are where imshow's automatic ticks fall on half layers.
RESULTS = {
    "probes": {
        "sinks": {"alpha": [[0.1, 0.9, 0.4, 0.2], [0.8, 0.05, 0.3, 0.6], [0.5, 0.5, 0.1, 0.9]]},
        "swap": {
            "replacement": [[0.0, 1.5, 2.0], [1.5, 0.0, 0.7], [2.0, 0.7, 0.0]],
            "interchange": [[0.0, 0.2, 3.1], [0.2, 0.0, 1.1], [3.1, 1.1, 0.0]],
        },
    }
}


@pytest.fixture
def drawn(monkeypatch):
    """The heatmap figures ``figures`` draws, rendered but kept open."""
    import matplotlib

    matplotlib.use("Agg")
    kept = []

    def keep(fig, **kwargs):
        integer_ticks(fig)  # as figure_png does before saving
        fig.canvas.draw()
        kept.append(fig)
        return b""

    monkeypatch.setattr(probe, "figure_png", keep)
    probe.figures(RESULTS)
    yield kept
    import matplotlib.pyplot as plt

    for fig in kept:
        plt.close(fig)


def _visible(ticks, limits) -> list[float]:
    low, high = sorted(limits)
    return [t for t in ticks if low - 1e-9 <= t <= high + 1e-9]


def test_heatmap_ticks_are_whole_layers_and_heads(drawn):
    assert len(drawn) == 2  # sinks, swap
    for fig in drawn:
        for ax in fig.get_axes():
            if not ax.get_images():
                continue  # a colourbar
            for ticks, limits in (
                (ax.get_xticks(), ax.get_xlim()),
                (ax.get_yticks(), ax.get_ylim()),
            ):
                shown = _visible(ticks, limits)
                assert shown and all(math.isclose(t, round(t)) for t in shown), shown


def test_colourbars_overlap_no_panel(drawn):
    for fig in drawn:
        renderer = fig.canvas.get_renderer()
        boxes = [ax.get_tightbbox(renderer) for ax in fig.get_axes()]
        for a, b in itertools.combinations(boxes, 2):
            assert not a.overlaps(b), (a, b)
