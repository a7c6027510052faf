"""Training and evaluating TinyGPT on the standard-library corpus, with a shared cache.

A trained model is stored under the cache folder (:func:`normlab._io.cache_dir`), addressed
by a hash of its architecture, training settings, seed and the corpus, as safetensors plus
a JSON log. Claims that ask for the same model share one training run; two processes
asking at once wait on a file lock instead of training twice. The address also hashes the
source of this trainer and of every normlab module it imports (:mod:`normlab._sources`),
so a change to the training code, a model or a layer retrains. A cached file that cannot
be read (truncated, corrupt) is reported with a warning, deleted and retrained.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from normlab._io import atomic_write_bytes, atomic_write_json, cache_dir, content_hash, file_lock
from normlab._sources import closure_hash
from normlab.data.corpus import corpus, corpus_fingerprint, sample_batch
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.quant.model import dequantize_model, quantize_model
from normlab.quant.spec import preset
from normlab.training.fit import fit

__all__ = ["LMTrainConfig", "evaluate_bpb", "lm_cache_key", "load_snapshot", "train_lm"]

_LN2 = math.log(2.0)


@dataclass(frozen=True)
class LMTrainConfig:
    """How to train a TinyGPT.

    Attributes:
        steps: optimizer steps.
        batch: sequences per step.
        lr: peak learning rate (AdamW), reached after ``warmup`` steps, then cosine decay
            to ``lr * min_lr_ratio``.
        weight_decay: decoupled weight decay on matrices (not on norms, biases, scales).
        warmup: linear warm-up steps.
        min_lr_ratio: final learning rate over peak.
        grad_clip: global gradient-norm clip (0 disables).
        betas: AdamW betas.
        train_bytes: train on only the first this many bytes of the training split (a
            smaller dataset, seen for more epochs); None for all of it.
        eval_every: evaluate validation bits-per-byte every this many steps (0: at the end).
        eval_batches: batches per evaluation.
        snapshots: steps after which to also store the weights (see :func:`load_snapshot`).
        matmul_quant: train with every linear layer's matmuls fake-quantized to this
            :data:`normlab.quant.PRESETS` scheme (e.g. "nvfp4"), straight-through; ``None``
            trains in fp32. Validation during training runs quantized too; the returned
            and cached model holds the fp32 master weights.
        matmul_quant_backward: also quantize the two gradient matmuls (input and weight
            gradients), as the NVFP4 training recipe does.
        matmul_quant_amax: a fixed NVFP4 tensor range for the forward operands (weights and
            activations) instead of each tensor's measured amax (nGPT's recipe: 1.0 for
            unit-norm data); gradients keep their measured amax. None measures it.
        lr_multipliers: ``(name_suffix, factor)`` pairs: a parameter whose name ends with
            ``name_suffix`` trains at ``factor`` times the schedule's learning rate (its own
            AdamW group, no weight decay), e.g. ``(("beta_raw", 30.0),)`` for OASIS's
            null coupling, a scalar that plain Adam moves by only about ``lr`` a step.
    """

    steps: int = 1500
    batch: int = 32
    lr: float = 2e-3
    weight_decay: float = 0.1
    warmup: int = 50
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0
    betas: tuple[float, float] = (0.9, 0.95)
    train_bytes: int | None = None
    eval_every: int = 0
    eval_batches: int = 4
    snapshots: tuple[int, ...] = ()
    matmul_quant: str | None = None
    matmul_quant_backward: bool = True
    matmul_quant_amax: float | None = None
    lr_multipliers: tuple[tuple[str, float], ...] = ()

    def lr_at(self, step: int) -> float:
        """Learning rate at ``step`` (0-based)."""
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        return self.lr * (self.min_lr_ratio + (1 - self.min_lr_ratio) * cosine)


def lm_cache_key(model_config: GPTConfig, train_config: LMTrainConfig, seed: int) -> str:
    """The content address of a trained model: architecture, training settings, seed, corpus,
    torch version and the source closure of the trainer and model modules."""
    return content_hash(
        {
            "model": model_config.to_dict(),
            "train": asdict(train_config),
            "seed": seed,
            "corpus": corpus_fingerprint(),
            "code": closure_hash([__name__]),
            "torch": torch.__version__.split("+")[0],
        }
    )


def _param_groups(
    model: torch.nn.Module, weight_decay: float, multipliers: tuple[tuple[str, float], ...] = ()
) -> list[dict[str, Any]]:
    """AdamW groups: decayed matrices, undecayed rest, and one undecayed group per
    ``lr_multipliers`` entry (``lr_scale`` is applied by the trainer's schedule)."""
    decay, no_decay = [], []
    scaled: dict[float, list[torch.nn.Parameter]] = {}
    for name, p in model.named_parameters():
        factor = next((f for suffix, f in multipliers if name.endswith(suffix)), None)
        if factor is not None:
            scaled.setdefault(float(factor), []).append(p)
            continue
        is_matrix = p.dim() >= 2 and "norm" not in name
        (decay if is_matrix else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": weight_decay, "lr_scale": 1.0},
        {"params": no_decay, "weight_decay": 0.0, "lr_scale": 1.0},
    ]
    groups += [{"params": ps, "weight_decay": 0.0, "lr_scale": f} for f, ps in scaled.items()]
    return groups


@torch.no_grad()
def evaluate_bpb(
    model: TinyGPT,
    split: str = "val",
    batches: int = 8,
    batch: int = 16,
    seed: int = 0,
    context: int | None = None,
) -> float:
    """Mean bits per byte of ``model`` on fixed random windows of a corpus split.

    The windows depend only on ``seed``, so two models are compared on the same text. The
    model's train/eval mode is restored afterwards.
    """
    context = context or model.config.context
    generator = torch.Generator().manual_seed(10_000 + seed)
    data = corpus(split)
    was_training = model.training
    model.eval()
    total = 0.0
    for _ in range(batches):
        x, y = sample_batch(data, batch, context, generator)
        logits = model(x)
        total += F.cross_entropy(logits.flatten(0, 1).float(), y.flatten()).item()
    model.train(was_training)
    return total / batches / _LN2


def _paths(key: str, step: int | None = None) -> tuple[Path, Path]:
    folder = cache_dir() / "lm"
    stem = key if step is None else f"{key}-step{step}"
    return folder / f"{stem}.safetensors", folder / f"{key}.json"


def _save_weights(model: TinyGPT, path: Path) -> None:
    from safetensors.torch import save

    # a model training through QuantLinear wrappers is saved under its plain names
    state = {
        k.replace(".inner.", "."): v.detach().contiguous() for k, v in model.state_dict().items()
    }
    atomic_write_bytes(path, save(state))


def _load_weights(model: TinyGPT, path: Path) -> None:
    from safetensors.torch import load

    model.load_state_dict(load(path.read_bytes()))


def _check_cached(model: TinyGPT, log: Any) -> None:
    """Raise ValueError unless a cached log and weights are a usable result.

    The log must be a JSON object whose ``train_bpb`` and ``val_bpb`` are non-empty lists
    of finite numbers, and every floating-point tensor must be finite, unless the log
    records a diverged run (whose last weights may be non-finite: that is its result).
    ``load_state_dict`` (strict) has already matched every tensor's name and shape.
    """
    if not isinstance(log, dict):
        raise ValueError("the log is not a JSON object")
    if log.get("diverged") is not None:
        return
    for name in ("train_bpb", "val_bpb"):
        values = log.get(name)
        if not isinstance(values, list) or not values:
            raise ValueError(f"the log's {name} is missing or empty")
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
            raise ValueError(f"the log's {name} holds a null or non-finite number")
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"tensor {name} holds NaN/inf in a run that did not diverge")


def _load_cached(model_config: GPTConfig, weights: Path, log_path: Path) -> tuple | None:
    """``(model, log)`` from the cache, or None (with a warning, the files deleted) when a
    cached file cannot be read or fails :func:`_check_cached` (a cache miss: the caller
    trains again)."""
    try:
        model = TinyGPT(model_config)
        _load_weights(model, weights)
        log = json.loads(log_path.read_text())
        _check_cached(model, log)
    except Exception as err:  # safetensors raises its own error type on corrupt bytes
        warnings.warn(
            f"normlab: the cached trained model {weights} (or its log {log_path.name}) is "
            f"corrupt ({type(err).__name__}: {err}); deleting it and training again.",
            RuntimeWarning,
            stacklevel=3,
        )
        weights.unlink(missing_ok=True)
        log_path.unlink(missing_ok=True)
        return None
    return model, log


def _train(
    model_config: GPTConfig, tc: LMTrainConfig, seed: int, key: str
) -> tuple[TinyGPT, dict]:
    torch.manual_seed(seed)
    model = TinyGPT(model_config)
    model.train()
    groups = _param_groups(model, tc.weight_decay, tc.lr_multipliers)
    for group in groups:
        group["lr"] = tc.lr * group["lr_scale"]
    # foreach: the same arithmetic as the per-tensor loop (bit-identical), a third of its time
    optimizer = torch.optim.AdamW(groups, lr=tc.lr, betas=tc.betas, foreach=True)
    if tc.matmul_quant is not None:
        fixed: dict[str, Any] = {}
        if tc.matmul_quant_amax is not None:
            weights, activations = preset(tc.matmul_quant)
            fixed = {
                "weights": replace(weights, tensor_amax=tc.matmul_quant_amax),
                "activations": replace(activations, tensor_amax=tc.matmul_quant_amax),
                "grads": activations,
            }
        quantize_model(model, tc.matmul_quant, backward=tc.matmul_quant_backward, **fixed)
    generator = torch.Generator().manual_seed(seed)
    data = corpus("train")
    log: dict[str, Any] = {"step": [], "train_bpb": [], "eval_step": [], "val_bpb": []}
    log["step_bpb"] = []  # every step's training bits per byte (the convergence curve)

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        return sample_batch(data, tc.batch, model_config.context, generator, limit=tc.train_bytes)

    def loss_fn(m: torch.nn.Module, xy: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = xy
        return F.cross_entropy(m(x).flatten(0, 1).float(), y.flatten())

    def after_step(step: int, loss: torch.Tensor) -> None:
        model.after_step()
        done = step + 1
        log["step_bpb"].append(loss.item() / _LN2)
        if done % 10 == 0 or done == tc.steps:
            log["step"].append(done)
            log["train_bpb"].append(loss.item() / _LN2)
        if (tc.eval_every and done % tc.eval_every == 0) or done == tc.steps:
            log["eval_step"].append(done)
            log["val_bpb"].append(evaluate_bpb(model, batches=tc.eval_batches, seed=seed))
        if done in tc.snapshots:
            _save_weights(model, _paths(key, done)[0])

    result = fit(
        model,
        loss_fn,
        batch,
        tc.steps,
        optimizer,
        schedule=lambda step: tc.lr_at(step) / tc.lr,
        grad_clip=tc.grad_clip,
        after_step=after_step,
        progress=f"training {key[:8]}",
    )
    log["seconds"] = result.seconds
    log["params"] = model.num_parameters()
    # A diverged run is a result: its log says where, and claims count it as their effects
    # declare (the weights are those of the last step, possibly non-finite).
    log["diverged"] = result.diverged.record() if result.diverged is not None else None
    dequantize_model(model)
    return model, log


def train_lm(
    model_config: GPTConfig, train_config: LMTrainConfig, seed: int = 0, *, cache: bool = True
) -> tuple[TinyGPT, dict[str, Any]]:
    """Train a TinyGPT, or load it from the cache when this exact run was done before.

    Args:
        model_config: the architecture.
        train_config: the training settings.
        seed: seeds the initialization and the batch order.
        cache: read and write the model cache.

    Returns:
        The model (in eval mode) and its training log: ``step``/``train_bpb`` every 10
        steps, ``step_bpb`` (the training bits per byte of every step, each on its own
        batch), ``eval_step``/``val_bpb``, ``seconds``, ``params``, ``key`` and
        ``diverged`` (None, or ``{"step", "last"}`` when the loss turned non-finite: the run
        stopped there and the model holds its last weights; never an exception).
    """
    key = lm_cache_key(model_config, train_config, seed)
    weights, log_path = _paths(key)
    if not cache:
        model, log = _train(model_config, train_config, seed, key)
        return model.eval(), {**log, "key": key}
    with file_lock(weights.with_suffix(".lock")):
        if weights.exists() and log_path.exists():
            hit = _load_cached(model_config, weights, log_path)
            if hit is not None:
                return hit[0].eval(), hit[1]
        model, log = _train(model_config, train_config, seed, key)
        log["key"] = key
        _save_weights(model, weights)
        atomic_write_json(log_path, log)
    return model.eval(), log


def load_snapshot(
    model_config: GPTConfig, train_config: LMTrainConfig, seed: int, step: int
) -> TinyGPT:
    """The weights stored after ``step`` of a run listed in ``train_config.snapshots``.

    Trains (or loads) the run first if needed.
    """
    if step not in train_config.snapshots:
        raise ValueError(f"step {step} is not in train_config.snapshots {train_config.snapshots}.")
    key = lm_cache_key(model_config, train_config, seed)
    path = _paths(key, step)[0]
    if not path.exists():
        train_lm(model_config, train_config, seed)
    model = TinyGPT(model_config)
    try:
        _load_weights(model, path)
    except Exception as err:
        warnings.warn(
            f"normlab: the cached snapshot {path} is corrupt ({type(err).__name__}: {err}); "
            "training the run again.",
            RuntimeWarning,
            stacklevel=2,
        )
        weights, log_path = _paths(key)
        for stale in (path, weights, log_path):
            stale.unlink(missing_ok=True)
        train_lm(model_config, train_config, seed)
        _load_weights(model, path)
    return model.eval()
