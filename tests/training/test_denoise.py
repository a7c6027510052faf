"""The denoising trainer: disjoint splits, a denoiser that learns, PSNR of noisy inputs."""

from __future__ import annotations

import math

import torch

from normlab.models.denoise import DenoiseCNN
from normlab.training.denoise import denoising_splits, noisy_psnr, train_denoiser


def test_splits_have_the_requested_sizes_and_share_no_image():
    train, val, test = denoising_splits(40, 8, 10, seed=0)
    assert (len(train), len(val), len(test)) == (2 * 40, 16, 20)
    flat = {split: {tuple(x.flatten().tolist()) for x in imgs}
            for split, imgs in (("train", train), ("val", val), ("test", test))}  # fmt: skip
    assert not flat["val"] & flat["test"] and not flat["train"] & flat["test"]


def test_training_improves_on_the_noisy_input_and_is_reproducible():
    torch.set_num_threads(1)
    train, _, test = denoising_splits(64, 8, 16, seed=0)

    def run() -> tuple[float, float]:
        torch.manual_seed(0)
        net = DenoiseCNN(3, 8)
        result = train_denoiser(net, train, steps=60, batch=16, lr=3e-3, max_sigma=25, seed=0)
        assert result.diverged is None
        return noisy_psnr(net, test, 25, torch.Generator().manual_seed(1))

    denoised, noisy = run()
    assert math.isfinite(denoised) and denoised > noisy + 0.5
    assert run() == (denoised, noisy)
