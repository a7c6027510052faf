"""Quantization formats as records, a fake-quantization module, and named schemes.

A :class:`QuantFormat` names one way of rounding a tensor (integer grid with its options,
NVFP4 or MXFP4); calling it fake-quantizes. :data:`PRESETS` pairs a weight format with an
activation format under the names of common schemes, for
:func:`normlab.quant.model.quantize_model`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from normlab._records import Record
from normlab._registry import Method, register
from normlab.papers import paper
from normlab.quant.formats import (
    GRANULARITIES,
    fake_quant_int,
    fake_quant_mxfp4,
    fake_quant_nvfp4,
)

__all__ = ["FORMAT_KINDS", "PRESETS", "FakeQuantize", "QuantFormat", "preset"]

FORMAT_KINDS = ("int", "nvfp4", "mxfp4")


@dataclass(frozen=True)
class QuantFormat(Record):
    """One fake-quantization format; ``fmt(x)`` rounds ``x`` to it.

    Attributes:
        kind: "int", "nvfp4" or "mxfp4".
        bits: integer bits (int only).
        symmetric: symmetric grid (int only).
        granularity: "tensor", "token", "channel" or "group" (int only; see
            :func:`~normlab.quant.formats.fake_quant_int`).
        axis: channel axis for "channel".
        group_size: group length for "group".
        denominator: explicit ``D`` of the scale (int only).
        block: FP4 block size; ``None`` for the format's own (16 NVFP4, 32 MXFP4).
        tensor_amax: fixed NVFP4 tensor range; ``None`` measures it.
    """

    kind: str = "int"
    bits: int = 8
    symmetric: bool = True
    granularity: str = "tensor"
    axis: int = 0
    group_size: int = 128
    denominator: float | None = None
    block: int | None = None
    tensor_amax: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in FORMAT_KINDS:
            raise ValueError(f"kind must be one of {FORMAT_KINDS}, got {self.kind!r}.")
        if self.granularity not in GRANULARITIES:
            raise ValueError(
                f"granularity must be one of {GRANULARITIES}, got {self.granularity!r}."
            )

    def __call__(
        self,
        x: torch.Tensor,
        *,
        bounds: tuple[torch.Tensor | float, torch.Tensor | float] | None = None,
        ste: bool = True,
    ) -> torch.Tensor:
        """Fake-quantize ``x``; ``bounds`` is a static ``(lo, hi)`` range (int only)."""
        if self.kind == "nvfp4":
            return fake_quant_nvfp4(
                x, block=self.block or 16, tensor_amax=self.tensor_amax, ste=ste
            )
        if self.kind == "mxfp4":
            return fake_quant_mxfp4(x, block=self.block or 32, ste=ste)
        return fake_quant_int(
            x,
            bits=self.bits,
            symmetric=self.symmetric,
            granularity=self.granularity,
            axis=self.axis,
            group_size=self.group_size,
            denominator=self.denominator,
            bounds=bounds,
            ste=ste,
        )

    def __str__(self) -> str:
        if self.kind != "int":
            return self.kind
        grid = "sym" if self.symmetric else "asym"
        return f"int{self.bits}-{grid}-{self.granularity}"


class FakeQuantize(nn.Module):
    """Fake-quantize its input to a :class:`QuantFormat`, with a straight-through gradient.

    Args:
        kind: "int", "nvfp4" or "mxfp4".
        **options: the other :class:`QuantFormat` fields (``bits``, ``granularity``, ...).
    """

    def __init__(self, kind: str = "int", **options: Any) -> None:
        super().__init__()
        self.format = QuantFormat(kind, **options)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.format(x)

    def extra_repr(self) -> str:
        return str(self.format)


def _int(bits: int, granularity: str, *, symmetric: bool = True, axis: int = 0) -> QuantFormat:
    return QuantFormat("int", bits=bits, symmetric=symmetric, granularity=granularity, axis=axis)


#: Named (weight format, activation format) schemes. "w8a8"/"w4a4": per-output-channel
#: weights x per-token activations, symmetric (as in QuaRot, without its rotation);
#: "w8a8-tensor"/"w4a4-tensor": Bondarenko et al.'s per-tensor scheme, symmetric weights
#: and asymmetric activations (static ranges when calibrated); "nvfp4"/"mxfp4": both
#: operands in the 4-bit float format.
PRESETS: dict[str, tuple[QuantFormat, QuantFormat]] = {
    "w8a8": (_int(8, "token"), _int(8, "token")),
    "w4a4": (_int(4, "token"), _int(4, "token")),
    "w8a8-tensor": (_int(8, "tensor"), _int(8, "tensor", symmetric=False)),
    "w4a4-tensor": (_int(4, "tensor"), _int(4, "tensor", symmetric=False)),
    "nvfp4": (QuantFormat("nvfp4"), QuantFormat("nvfp4")),
    "mxfp4": (QuantFormat("mxfp4"), QuantFormat("mxfp4")),
}


def preset(name: str) -> tuple[QuantFormat, QuantFormat]:
    """The ``(weights, activations)`` formats of a named scheme in :data:`PRESETS`."""
    key = name.lower().replace("_", "-")
    if key not in PRESETS:
        raise ValueError(f"Unknown quantization preset {name!r}; choose from {sorted(PRESETS)}.")
    return PRESETS[key]


def _register(name: str, kind: str, paper_key: str, summary: str, **kw: Any) -> None:
    builder = functools.partial(FakeQuantize, kind)
    register(Method(name, "quant", builder, paper(paper_key), summary, layout="other", **kw))


_register(
    "int-quant",
    "int",
    "clipped",
    "round to a b-bit integer grid: per tensor / token / channel / group, (a)symmetric",
    aliases=("fake-quant", "int8"),
)
_register(
    "nvfp4",
    "nvfp4",
    "ngpt-fp4",
    "E2M1 values in blocks of 16 with an E4M3 block scale and an FP32 tensor scale",
)
_register(
    "mxfp4",
    "mxfp4",
    "ngpt-fp4",
    "E2M1 values in blocks of 32 with a power-of-two (E8M0) block scale",
)
