"""Probes: read a trained model's normalization pathologies without changing it."""

from normlab.probes.depth import DepthProfile, depth_profile, ln_scaling
from normlab.probes.geometry import (
    GeometryProfile,
    TaleResult,
    TaleStep,
    distortion,
    layer_profile,
    tale_prune,
)
from normlab.probes.hooks import FAMILIES, ModelAdapter, NormSite, Trace, adapt
from normlab.probes.numerics import (
    NormError,
    SoftmaxError,
    condition_number,
    error_bound,
    lowp_norm,
    lowp_softmax,
    outlier_sweep,
    sink_sweep,
    unit_roundoff,
)
from normlab.probes.outliers import (
    MassiveActivation,
    OutlierReport,
    SiteOutliers,
    inf_norm,
    kurtosis,
    massive_activations,
    outlier_stats,
)
from normlab.probes.rank import RankRecord, affine_rank, layer_ranks, numerical_rank, rank_record
from normlab.probes.sinks import SinkReport, sink_alpha, sink_stats
from normlab.probes.swap import (
    PruneCurve,
    SwapKL,
    kl_to_base,
    pruning_curve,
    pruning_order,
    swap_kl,
)

__all__ = [
    "FAMILIES",
    "DepthProfile",
    "GeometryProfile",
    "MassiveActivation",
    "ModelAdapter",
    "NormError",
    "NormSite",
    "OutlierReport",
    "PruneCurve",
    "RankRecord",
    "SinkReport",
    "SiteOutliers",
    "SoftmaxError",
    "SwapKL",
    "TaleResult",
    "TaleStep",
    "Trace",
    "adapt",
    "affine_rank",
    "condition_number",
    "depth_profile",
    "distortion",
    "error_bound",
    "inf_norm",
    "kl_to_base",
    "kurtosis",
    "layer_profile",
    "layer_ranks",
    "ln_scaling",
    "lowp_norm",
    "lowp_softmax",
    "massive_activations",
    "numerical_rank",
    "outlier_stats",
    "outlier_sweep",
    "pruning_curve",
    "pruning_order",
    "rank_record",
    "sink_alpha",
    "sink_stats",
    "sink_sweep",
    "swap_kl",
    "tale_prune",
    "unit_roundoff",
]
