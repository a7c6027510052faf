"""``normlab fold IN OUT``: convert a model's foldable LayerNorms to RMSNorm, verified.

Exit codes: 0 converted and verified; 1 the outputs changed by more than the tolerance
(nothing written); 2 bad input or output (a message says what), or nothing in the model is
foldable (the reasons are printed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from normlab.cli._common import CliError, Formatter, check_output, fail, positive_int

__all__ = ["add_parser"]

#: Weight files a fold replaces in an output folder (with --overwrite).
_WEIGHTS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json")


def _fold(args: argparse.Namespace) -> int:
    import torch

    from normlab.cli._load import load_checked
    from normlab.models.checkpoint import builtin_tokens, save_model
    from normlab.surgery.fold import fold_layernorms
    from normlab.surgery.fold_gains import center_unembed, fold_rms_gains

    try:
        out = check_output(
            args.output, inputs=(Path(args.input),), empty=True, overwrite=args.overwrite
        )
        model, kind = load_checked(args.input)
    except CliError as err:
        return fail("fold", str(err))
    tokens = builtin_tokens(model, args.input, batch=args.batch, tokens=args.tokens)
    example = tokens if kind == "normlab" else {"input_ids": tokens}
    with torch.no_grad():
        result = fold_layernorms(model, example, tied=args.tied)
    for site in result.analysis.sites:
        print(f"  {site.name}: {'foldable' if site.foldable else 'not foldable'}")
        for reason in site.reasons:
            print(f"      - {reason}")
    gains = fold_rms_gains(model, example)  # RMSNorm gains (Llama-style) into their readers
    for name, readers in gains.folded.items():
        print(f"  {name}: RMSNorm gain folded into {', '.join(readers)}")
    checks = [c for c in (result.check, gains.check) if c is not None]
    if args.center_unembed:
        centred = center_unembed(model, example)
        checks.append(centred.check)
        print("  unembedding centred (log-probabilities compared)")
    if not result.folded and not gains.folded:
        n = len(result.analysis.sites)
        what = "has no LayerNorm" if n == 0 else f"has {n} LayerNorm(s), none foldable"
        return fail("fold", f"nothing to fold: {args.input} {what}, and no RMSNorm gain.")
    change = float(result.max_abs_change or 0.0)
    shape = "x".join(str(s) for s in tokens.shape)
    print(
        f"folded {len(result.folded)} of {len(result.analysis.sites)} LayerNorm(s); "
        f"max |delta logits| = {change:.3e} in fp32 on built-in text ({shape} tokens)"
    )
    ok = True
    for check in checks:
        bound = check.tolerance if args.tolerance is None else args.tolerance
        passed = check.folded_error <= bound
        ok = ok and passed
        print(
            f"  verify ({check.compare}): folded fp32 vs float64 = {check.folded_error:.3e}; "
            f"unfolded fp32 vs float64 (the model's own rounding) = {check.reference_error:.3e}; "
            f"tolerance {bound:.3e} -> {'ok' if passed else 'FAILED'}"
        )
    if not ok:
        print("normlab fold: verification failed; nothing written.", file=sys.stderr)
        return 1
    record = {
        "normlab_fold": 1,
        "structure": result.structure(),
        "max_abs_logit_change": change,
        "checks": [c.to_dict() for c in checks],
        "verified_on": f"normlab val corpus, {shape} tokens, float32",
        "report": result.to_dict(),
    }
    if out.is_dir():  # --overwrite: no stale weight file may survive beside the new one
        for pattern in _WEIGHTS:
            for stale in out.glob(pattern):
                stale.unlink()
    save_model(model, out, fold=record)
    weights = [p.name for p in out.glob("*.safetensors")]
    print(f"wrote {', '.join(str(out / w) for w in weights)}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fold",
        help="fold LayerNorm into RMSNorm (exact), verified on built-in text",
        description="Fold every foldable LayerNorm of a model into RMSNorm (an exact "
        "conversion), verify on built-in text and write the result as safetensors.\n"
        "Exit codes: 0 written; 1 verification failed (nothing written); 2 bad input or "
        "output, or nothing foldable.",
        formatter_class=Formatter,
    )
    p.add_argument("input", help="a local Hugging Face model folder or normlab checkpoint")
    p.add_argument("output", help="folder to write the folded model to (new or empty)")
    p.add_argument(
        "--tied",
        choices=("untie", "refuse"),
        default="untie",
        help="tied input/output embeddings: give the head its own copy, or refuse",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="max |folded fp32 - float64| allowed (default: 4x the unfolded model's "
        "own fp32 rounding error against float64)",
    )
    p.add_argument(
        "--center-unembed",
        action="store_true",
        help="also centre the unembedding over the vocabulary (probabilities kept)",
    )
    p.add_argument("--batch", type=positive_int, default=4, help="sequences of built-in text")
    p.add_argument("--tokens", type=positive_int, default=64, help="tokens per sequence")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="allow writing into the input folder or a non-empty folder (its "
        "weight files are replaced)",
    )
    p.set_defaults(func=_fold)
