"""Model surgery: change a model's normalization without retraining it."""

from normlab.surgery.replace import Replacement, is_layer_norm, norm_eps, norm_size, replace_norms

__all__ = ["Replacement", "is_layer_norm", "norm_eps", "norm_size", "replace_norms"]
