"""Fake quantization (kind "quant"): integer grids, NVFP4, MXFP4, Hadamard rotations, and
wrapping a model's linear layers for W8A8 / W4A4 / FP4 evaluation and training."""

from normlab.quant.formats import (
    E2M1_GRID,
    fake_quant_int,
    fake_quant_mxfp4,
    fake_quant_nvfp4,
    round_e2m1,
    round_e4m3,
    ste,
)
from normlab.quant.hadamard import hadamard, hadamard_matrix, random_hadamard
from normlab.quant.model import (
    QuantLinear,
    calibrate,
    dequantize_model,
    quantize_model,
    quantized,
)
from normlab.quant.nsn import IntKIVI, KMeansVQ, NSNQuantizer, QuantizedChunk
from normlab.quant.peers import PeerQuantizer, clear_stale_build_lock
from normlab.quant.snr import gemm_snr
from normlab.quant.spec import PRESETS, FakeQuantize, QuantFormat, preset

__all__ = [
    "E2M1_GRID",
    "PRESETS",
    "FakeQuantize",
    "IntKIVI",
    "KMeansVQ",
    "NSNQuantizer",
    "PeerQuantizer",
    "QuantFormat",
    "QuantLinear",
    "QuantizedChunk",
    "calibrate",
    "clear_stale_build_lock",
    "dequantize_model",
    "fake_quant_int",
    "fake_quant_mxfp4",
    "fake_quant_nvfp4",
    "gemm_snr",
    "hadamard",
    "hadamard_matrix",
    "preset",
    "quantize_model",
    "quantized",
    "random_hadamard",
    "round_e2m1",
    "round_e4m3",
    "ste",
]
