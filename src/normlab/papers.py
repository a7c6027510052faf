"""The papers normlab implements, named once so methods and claims cite them the same way.

The seed abstracts (``shared/seeds/``) carry no titles, so each seed paper gets a short
descriptive title here plus the opening words of its abstract (``seed``), which locate it in
the seed files. Methods that predate the seeds (LayerNorm, RMSNorm, softmax) cite their
original paper and have ``seed=""``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PAPERS", "Paper", "paper"]


@dataclass(frozen=True)
class Paper:
    """A paper a method or claim comes from.

    Attributes:
        key: short identifier used in code.
        title: short descriptive title.
        seed: the opening words of the seed abstract, or "" for a non-seed paper.
    """

    key: str
    title: str
    seed: str = ""


_ALL = (
    Paper("layernorm", "Layer Normalization (Ba, Kiros & Hinton, 2016)"),
    Paper("rmsnorm", "Root Mean Square Layer Normalization (Zhang & Sennrich, 2019)"),
    Paper("softmax", "Attention Is All You Need (Vaswani et al., 2017)"),
    Paper("softmax1", "Attention Is Off By One (Miller, 2023)"),
    Paper(
        "clipped",
        "Quantizable Transformers: Removing Outliers by Helping Attention Heads "
        "Do Nothing (Bondarenko et al., 2023)",
    ),
    Paper("sparsemax", "From Softmax to Sparsemax (Martins & Astudillo, 2016)"),
    Paper("entmax", "Sparse Sequence-to-Sequence Models (Peters et al., 2019)"),
    Paper(
        "dyt-original",
        "Transformers without Normalization (Zhu, Chen, He, LeCun & Liu, CVPR 2025)",
    ),
    Paper(
        "dyt",
        "DyT as a Regime-Dependent Implicit Regularizer",
        "Dynamic Tanh (DyT) removes LayerNorm by bounding activations",
    ),
    Paper(
        "ngpt-fp4",
        "nGPT Is Inherently Robust to NVFP4 Training",
        "Training large language models at 4-bit precision is critical",
    ),
    Paper(
        "quadnorm",
        "QuadNorm: Quadrature Normalization for Neural Operators",
        "Normalization layers in neural operators usually compute statistics",
    ),
    Paper(
        "zc-swish",
        "Zero-Centered Swish for BatchNorm-Free Networks",
        "Batch Normalization (BN) is a cornerstone of deep learning, yet",
    ),
    Paper(
        "guaranteed-approx",
        "Hardware-Efficient Softmax and LayerNorm with Guaranteed Normalization for Edge Devices",
        "In Transformer models, non-GEMM (non-General Matrix Multiplication)",
    ),
    Paper(
        "kappa",
        "Attention Operators from Kaniadakis and Abe Entropies",
        "We derive two attention operators from generalized statistical entropies",
    ),
    Paper(
        "oasis",
        "OASIS: Outlier- and Sink-Aware Inter-Layer Null Signaling",
        "We propose OASIS, an outlier- and sink-aware technique",
    ),
    Paper(
        "affine-rank",
        "Rank Collapse Revisited: LayerNorm Affine-Rank Neutrality, "
        "Residuals and Position-Gated Output Projections",
        "A widely cited result by Dong et al. (2021)",
    ),
    Paper(
        "adaptive-scaling",
        "Moving Objects in TESS with a W-Net and Learned Data Scaling",
        "We present a novel method for extracting moving objects from TESS data",
    ),
    Paper(
        "norin",
        "NoRIN: Non-Linear Reversible Normalization with the Johnson S_U Transform",
        "Reversible instance normalization (RevIN) and its successors",
    ),
    Paper(
        "pamod",
        "PAMod: Phase-Amplitude Modulation for Cyclical Distribution Shifts",
        "Real-world time series forecasting faces the fundamental challenge",
    ),
    Paper(
        "stablegrad",
        "StableGrad: Optimizer-Level Scale Control for Deep PINNs",
        "Training very deep neural networks requires controlling the propagation",
    ),
    Paper(
        "kalman",
        "Kalman-Filter Reward Normalization for Policy Gradients",
        "We propose a simple yet effective alternative to reward normalization",
    ),
    Paper(
        "slas",
        "Reward Hacking and Advantage Normalization in GRPO for Text-to-Image",
        "Recently, post-training methods based on reinforcement learning",
    ),
    Paper(
        "p-grpo",
        "P-GRPO: Preference-Aware Group Normalization for Pluralistic Alignment",
        "Despite their sophisticated general-purpose capabilities, Large Language Models",
    ),
    Paper(
        "ssl",
        "Self-Supervised Learning as K-L Optimisation: Centering from Cluster Priors",
        "Self-supervised learning (SSL) is recognized as an essential tool",
    ),
    Paper(
        "macro",
        "MACRO: Msign-Aligned Constrained Riemannian Optimizer",
        "The empirical success of large language model (LLM) pre-training",
    ),
    Paper(
        "wne",
        "Wrapped Normalization Equivariance",
        "Normalization Equivariance (NE) is a structural prior",
    ),
    Paper(
        "cdflow",
        "CDFlow: Circulant-Diagonal Invertible Linear Layers for Flows",
        "Normalizing flows are deep generative models",
    ),
    Paper(
        "nsnquant",
        "NSNQuant: Calibration-Free Vector Quantization of the KV Cache",
        "Large Language Model (LLM) inference is typically memory-intensive",
    ),
    Paper(
        "fold-ln",
        "Foldable LayerNorm: Exact LayerNorm-to-RMSNorm Conversion",
        "Layer normalization (LN) is a fundamental component in modern deep learning",
    ),
    Paper(
        "swap-kl",
        "Replacement vs. Interchange Swap-KL for Layer Equivalence",
        'When researchers ask whether two transformer layers are "equivalent"',
    ),
    Paper(
        "tale",
        "Task-Aware Layer Pruning Helps Out-of-Distribution, Not In-Distribution",
        "Recent work has promoted task-aware layer pruning",
    ),
    Paper(
        "curse-of-depth",
        "Sparsity Dampens Pre-LN Variance Growth and Eases the Curse of Depth",
        "Recent work has demonstrated the curse of depth",
    ),
    Paper(
        "numerics",
        "Mixed-Precision Analysis of Transformer Inference",
        "Transformers are the state-of-the-art architecture for large language models",
    ),
    Paper(
        "bn-unlearning",
        "A BatchNorm Confound in Unlearning Evaluation",
        "Approximate machine unlearning aims to remove the influence",
    ),
    Paper(
        "bn-geometry",
        "BatchNorm Switching Hyperplanes and Local Region Density",
        "Batch normalization (BN) is central to modern deep networks",
    ),
    Paper(
        "delayed-spike",
        "Delayed Loss Spikes from Normalization's Effective Learning Rate",
        "Delayed loss spikes have been reported in neural-network training",
    ),
    Paper(
        "curvature-spikes",
        "Loss Spikes from Normalization-Layer Curvature in Clustering Heads",
        "Large-scale pretraining of transformers has been central to the success",
    ),
    Paper(
        "looped",
        "The Fully Looped Transformer: Inter-Loop Signals and Attention Injection",
        "Scaling model performance typically requires increasing model size",
    ),
    Paper(
        "complex-bn",
        "Riemannian Batch Normalization on Complex Domains (HPD and the Siegel Disk)",
        "Riemannian neural networks have proven effective in solving",
    ),
    Paper(
        "dino", "Emerging Properties in Self-Supervised Vision Transformers (Caron et al. 2021)"
    ),
    Paper("grpo", "DeepSeekMath: Group Relative Policy Optimization (Shao et al., 2024)"),
    Paper("dr-grpo", "Understanding R1-Zero-Like Training: Dr. GRPO (Liu et al., 2025)"),
    Paper("rloo", "Back to Basics: REINFORCE Leave-One-Out (Ahmadian et al., 2024)"),
    Paper("gdpo", "GDPO: Group Reward-Decoupled Normalization for Multi-Reward RL"),
    Paper("kivi", "KIVI: Tuning-Free Asymmetric 2-bit KV-Cache Quantization (Liu et al., 2024)"),
    Paper(
        "revin",
        "Reversible Instance Normalization for Accurate Time-Series Forecasting against "
        "Distribution Shift (Kim et al., 2022)",
    ),
    Paper(
        "dish-ts",
        "Dish-TS: A General Paradigm for Alleviating Distribution Shift in Time Series "
        "Forecasting (Fan et al., 2023)",
    ),
    Paper(
        "san",
        "Adaptive Normalization for Non-stationary Time Series Forecasting: A Temporal Slice "
        "Perspective (Liu et al., 2023)",
    ),
    Paper(
        "fan",
        "Frequency Adaptive Normalization For Non-stationary Time Series Forecasting "
        "(Ye et al., 2024)",
    ),
)

#: Every paper by key.
PAPERS: dict[str, Paper] = {p.key: p for p in _ALL}


def paper(key: str) -> str:
    """The title of the paper registered under ``key``."""
    try:
        return PAPERS[key].title
    except KeyError:
        raise KeyError(f"No paper {key!r}; known: {', '.join(sorted(PAPERS))}.") from None
