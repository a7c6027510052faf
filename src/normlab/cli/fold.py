"""``normlab fold IN OUT``: convert a model's foldable LayerNorms to RMSNorm, verified.

Exit codes: 0 converted and verified; 1 the outputs changed by more than the tolerance
(nothing written); 2 bad input or output (a message says what: a negative or NaN
``--tolerance``, ``--tokens`` above the model's positions, an input model with non-finite
weights or logits), or nothing in the model is foldable (the reasons are printed). Tied
input/output embeddings stay tied where the fold leaves both copies equal; otherwise the
terminal says which were untied and how the weights' size changed.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
from pathlib import Path

from normlab.cli._common import CliError, Formatter, check_output, fail, positive_int

__all__ = ["add_parser"]

#: Tokens per sequence when ``--tokens`` is not given (capped by the model's positions).
DEFAULT_TOKENS = 64
#: Files beside the weights that the folded model keeps (its tokenizer, generation setup).
_COMPANIONS = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "generation_config.json",
)
#: Weight files a fold replaces in an output folder (with --overwrite).
_WEIGHTS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json")


def tolerance_type(text: str) -> float:
    """argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _weights_size(folder: Path) -> int:
    return sum(f.stat().st_size for pattern in _WEIGHTS for f in folder.glob(pattern))


def _check_finite(model: object, example: object, source: str) -> None:
    """:class:`CliError` when the input model's weights or logits are not finite."""
    import torch

    from normlab.cli._load import nonfinite_weights
    from normlab.surgery.fold_detect import run_example
    from normlab.surgery.fold_verify import model_output

    bad = nonfinite_weights(model)
    if bad:
        raise CliError(f"the input model {source} has non-finite weights ({bad}); nothing to fold")
    with torch.no_grad():
        logits = model_output(run_example(model, example))
    if not bool(torch.isfinite(logits).all()):
        raise CliError(
            f"the input model {source} gives non-finite logits on built-in text (its weights "
            "are finite: the activations overflow); nothing to fold"
        )


def _cli_words(text: str) -> str:
    """A reason from the library, with its Python argument spelled as this command's option
    (``tied='untie'`` is ``--tied untie`` here)."""
    return text.replace("tied='untie'", "--tied untie").replace("tied='refuse'", "--tied refuse")


def _fold(args: argparse.Namespace) -> int:
    import torch

    from normlab.cli._load import load_checked
    from normlab.models.checkpoint import builtin_batch, model_inputs, position_limit, save_model
    from normlab.surgery.fold import fold_layernorms
    from normlab.surgery.fold_gains import center_unembed, fold_rms_gains

    try:
        out = check_output(
            args.output, inputs=(Path(args.input),), empty=True, overwrite=args.overwrite
        )
        model, kind = load_checked(args.input)
        limit = position_limit(model)
        n = min(DEFAULT_TOKENS, limit or DEFAULT_TOKENS) if args.tokens is None else args.tokens
        if limit is not None and n > limit:
            raise CliError(
                f"--tokens {n} is more than the {limit} positions {args.input} reads; use "
                f"--tokens {limit} or fewer"
            )
        batch = builtin_batch(model, args.input, batch=args.batch, tokens=n)
        tokens = batch.ids
        example: object = tokens if kind == "normlab" else model_inputs(model, tokens, batch.mask)
        _check_finite(model, example, args.input)
        with torch.no_grad():
            result = fold_layernorms(model, example, tied=args.tied)
            gains = fold_rms_gains(model, example)  # RMSNorm gains into their readers
    except (CliError, ValueError) as err:  # ValueError: already folded
        return fail("fold", str(err))
    for site in result.analysis.sites:
        print(f"  {site.name}: {'foldable' if site.foldable else 'not foldable'}")
        for reason in site.reasons:
            print(f"      - {_cli_words(reason)}")
    for name, readers in gains.folded.items():
        print(f"  {name}: RMSNorm gain folded into {', '.join(readers)}")
    for name, why in gains.refused.items():
        print(f"  {name}: gain kept: {_cli_words(why)}")
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
    if gains.folded:
        change = max(change, gains.check.change if gains.check else 0.0)
    print(
        f"folded {len(result.folded)} of {len(result.analysis.sites)} LayerNorm(s) and "
        f"{len(gains.folded)} of {len(gains.folded) + len(gains.refused)} norm gain(s); "
        f"max |delta logits| = {change:.3e} in fp32 on built-in text ({shape} tokens)"
    )
    ok = True
    for check in checks:
        bound = check.tolerance if args.tolerance is None else args.tolerance
        passed = check.folded_error <= bound
        ok = ok and passed
        ref = check.reference.split(" ")[0]  # float32 where the model has no float64 kernel
        print(
            f"  verify ({check.compare}): folded fp32 vs {ref} = {check.folded_error:.3e}; "
            f"unfolded fp32 vs {ref} (the model's own rounding) = {check.reference_error:.3e}; "
            f"tolerance {bound:.3e} -> {'ok' if passed else 'FAILED'}"
        )
        if ref != "float64":
            print(f"    reference: {check.reference}")
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
    try:  # checked before any work, but a disk can fill or a mount change meanwhile
        save_model(model, out, fold=record)
        source = Path(args.input)
        for name in _COMPANIONS:  # the tokenizer travels with the model (fold -> probe reads it)
            if (source / name).is_file() and source.resolve() != out.resolve():
                shutil.copyfile(source / name, out / name)
    except OSError as err:
        return fail("fold", f"cannot write the folded model to {out} ({err}); choose another one")
    weights = [p.name for p in out.glob("*.safetensors")]
    if result.untied or gains.untied:
        before, after = _weights_size(Path(args.input)), _weights_size(out)
        pairs = ", ".join(
            [f"{other} (was tied to {writer})" for writer, other in result.untied]
            + [f"{name} (+{n} parameters)" for name, n in gains.untied.items()]
        )
        print(
            f"  tied embeddings untied: {pairs} now has its own copy, because the fold changes "
            f"the two copies differently; weights {before / 1e6:.2f} MB -> {after / 1e6:.2f} MB "
            "(pass --tied refuse to stop instead)"
        )
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
        type=tolerance_type,
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
    p.add_argument(
        "--tokens",
        type=positive_int,
        default=None,
        help=f"tokens per sequence (default {DEFAULT_TOKENS}, or the model's positions if "
        "fewer; more than the model's positions is refused)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="allow writing into the input folder or a non-empty folder (its "
        "weight files are replaced)",
    )
    p.set_defaults(func=_fold)
