"""Model surgery: change a model's normalization without retraining it."""

from normlab.surgery.batchnorm import BNRecalibration, batchnorm_modules, recalibrate_bn
from normlab.surgery.fold import FoldResult, apply_fold_structure, fold_layernorms
from normlab.surgery.fold_detect import FoldAnalysis, FoldSite, analyze_fold, is_centering_norm
from normlab.surgery.fold_gains import GainFold, center_unembed, fold_rms_gains
from normlab.surgery.fold_verify import FoldCheck, verify_transform
from normlab.surgery.hf_format import save_hf
from normlab.surgery.hf_plain import export_plain
from normlab.surgery.replace import Replacement, is_norm_layer, norm_eps, norm_size, replace_norms

__all__ = [
    "BNRecalibration",
    "FoldAnalysis",
    "FoldCheck",
    "FoldResult",
    "FoldSite",
    "GainFold",
    "Replacement",
    "analyze_fold",
    "apply_fold_structure",
    "batchnorm_modules",
    "center_unembed",
    "export_plain",
    "fold_layernorms",
    "fold_rms_gains",
    "is_centering_norm",
    "is_norm_layer",
    "norm_eps",
    "norm_size",
    "recalibrate_bn",
    "replace_norms",
    "save_hf",
    "verify_transform",
]
