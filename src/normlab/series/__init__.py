"""Reversible normalizers for forecasting (kind "series").

One contract for all (see :class:`ReversibleNorm`): ``normalize(x) -> (z, state)`` for a
window ``x`` of shape (batch, length, channels), ``denormalize(y_hat, state)`` for the
backbone's forecast, ``invert(z, state)`` for the exact round trip on the window itself,
and ``auxiliary_loss`` / ``aux_schedule`` for the extra training signals of FAN and SAN.
"""

from normlab.series._base import ReversibleNorm, State, instance_stats, moments, window_scale
from normlab.series.calendar import CalendarRevIN
from normlab.series.dishts import DishTS
from normlab.series.fan import FAN, top_k_frequencies
from normlab.series.johnson import (
    JohnsonFit,
    johnson_su,
    johnson_su_inverse,
    moment_matched,
    slifker_shapiro,
    slifker_shapiro_quantiles,
)
from normlab.series.norin import DELTA_RANGE, NoRIN, fit_shape
from normlab.series.pamod import PAMod
from normlab.series.revin import RevIN
from normlab.series.san import SAN
from normlab.series.search import ShapeSearch, select_shape

__all__ = [
    "DELTA_RANGE",
    "FAN",
    "SAN",
    "CalendarRevIN",
    "DishTS",
    "JohnsonFit",
    "NoRIN",
    "PAMod",
    "RevIN",
    "ReversibleNorm",
    "ShapeSearch",
    "State",
    "fit_shape",
    "instance_stats",
    "johnson_su",
    "johnson_su_inverse",
    "moment_matched",
    "moments",
    "select_shape",
    "slifker_shapiro",
    "slifker_shapiro_quantiles",
    "top_k_frequencies",
    "window_scale",
]
