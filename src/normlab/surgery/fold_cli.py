"""``normlab fold IN OUT``: convert a model's foldable LayerNorms to RMSNorm, verified.

Exit codes: 0 converted and verified; 1 the outputs changed by more than the tolerance
(nothing written); 2 nothing in the model is foldable (the reasons are printed) or the
input could not be read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["fold_command"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="normlab fold",
        description="Fold every foldable LayerNorm of a model into RMSNorm (exact conversion), "
        "verify on built-in text and write the result as safetensors.",
    )
    parser.add_argument("input", help="a local Hugging Face model folder or normlab checkpoint")
    parser.add_argument("output", help="folder to write the folded model to")
    parser.add_argument(
        "--tied",
        choices=("untie", "refuse"),
        default="untie",
        help="tied input/output embeddings: give the head its own copy, or refuse to fold",
    )
    parser.add_argument("--tolerance", type=float, default=1e-5, help="max |delta logits|")
    parser.add_argument("--batch", type=int, default=4, help="sequences of built-in text")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per sequence")
    return parser


def fold_command(argv: Sequence[str] | None = None) -> int:
    """Run ``normlab fold`` with command-line arguments ``argv``; return the exit code."""
    import torch

    from normlab.models.checkpoint import builtin_tokens, load_model, save_model
    from normlab.surgery.fold import fold_layernorms

    args = _parser().parse_args(argv)
    try:
        model, kind = load_model(args.input)
    except (FileNotFoundError, ValueError, OSError) as err:
        print(f"normlab fold: cannot load {args.input}: {err}", file=sys.stderr)
        return 2
    model = model.float()
    tokens = builtin_tokens(model, args.input, batch=args.batch, tokens=args.tokens)
    example = tokens if kind == "normlab" else {"input_ids": tokens}
    with torch.no_grad():
        result = fold_layernorms(model, example, tied=args.tied)
    for site in result.analysis.sites:
        mark = "foldable" if site.foldable else "not foldable"
        print(f"  {site.name}: {mark}")
        for reason in site.reasons:
            print(f"      - {reason}")
    if not result.folded:
        n = len(result.analysis.sites)
        what = "has no LayerNorm" if n == 0 else f"has {n} LayerNorm(s), none foldable"
        print(f"normlab fold: nothing to fold: {args.input} {what}.", file=sys.stderr)
        return 2
    change = float(result.max_abs_change or 0.0)
    shape = "x".join(str(s) for s in tokens.shape)
    print(
        f"folded {len(result.folded)} of {len(result.analysis.sites)} LayerNorm(s); "
        f"max |delta logits| = {change:.3e} in fp32 on built-in text ({shape} tokens), "
        f"tolerance {args.tolerance:.1e}"
    )
    if not change <= args.tolerance:
        print("normlab fold: verification failed; nothing written.", file=sys.stderr)
        return 1
    record = {
        "normlab_fold": 1,
        "structure": result.structure(),
        "max_abs_logit_change": change,
        "verified_on": f"normlab val corpus, {shape} tokens, float32",
        "report": result.to_dict(),
    }
    out = save_model(model, args.output, fold=record)
    print(f"wrote {out / 'model.safetensors'}")
    return 0
