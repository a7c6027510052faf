"""Blind denoising: a denoiser trained on clean images with Gaussian noise of a random level
per image, and its PSNR at a fixed test noise level (the WNE claim's trainer).

Noise levels are on the 8-bit scale (``sigma`` in units of 1/255, images in [0, 1]).
:func:`denoising_splits` builds the train / validation / test images: validation is held out
of the training pool, test comes from the digits' test split and scenes of other seeds.
"""

from __future__ import annotations

import torch

from normlab.data.images import load_digits_tensors
from normlab.models.denoise import psnr, synthetic_scenes, upsample
from normlab.training.fit import FitResult, fit

__all__ = ["blind_noise", "denoised_psnr", "denoising_splits", "noisy_psnr", "train_denoiser"]


def denoising_splits(
    train_images: int, val_images: int, test_images: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(train, val, test)`` 16x16 images: the training pool is ``train_images + val_images``
    upsampled digits and as many synthetic scenes, shuffled by ``seed``, of which
    ``2 val_images`` are held out for validation; test is ``test_images`` digits of the
    digits' test split and as many scenes of another seed (no image in two splits)."""
    d = load_digits_tensors(seed)
    n, m, v = train_images, test_images, val_images
    pool = torch.cat([upsample(d.train_x[: n + v]), synthetic_scenes(n + v, seed=seed)])
    order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))
    test = torch.cat([upsample(d.test_x[:m]), synthetic_scenes(m, seed=10_000 + seed)])
    return pool[order[2 * v :]], pool[order[: 2 * v]], test


def blind_noise(clean: torch.Tensor, max_sigma: float, generator: torch.Generator) -> torch.Tensor:
    """``clean`` plus Gaussian noise of a level drawn per image, sigma ~ U[0, max_sigma]/255
    (blind denoising: the level is not given to the denoiser)."""
    sigma = torch.rand(len(clean), 1, 1, 1, generator=generator) * max_sigma / 255
    return clean + sigma * torch.randn(clean.shape, generator=generator)


def train_denoiser(
    model: torch.nn.Module,
    images: torch.Tensor,
    *,
    steps: int,
    batch: int,
    lr: float,
    max_sigma: float,
    seed: int,
) -> FitResult:
    """Train ``model`` (noisy -> clean) with Adam on MSE for ``steps`` batches of ``batch``
    images drawn from ``images``, each with noise sigma ~ U[0, max_sigma]/255; the batches
    and the noise come from ``seed``. Divergence is returned, not raised (:func:`fit`)."""
    g = torch.Generator().manual_seed(seed)

    def draw(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = images[torch.randint(len(images), (batch,), generator=g)]
        return blind_noise(x, max_sigma, g), x

    return fit(
        model,
        lambda f, b: (f(b[0]) - b[1]).square().mean(),
        draw,
        steps,
        torch.optim.Adam(model.parameters(), lr=lr),
    )


@torch.no_grad()
def denoised_psnr(model: torch.nn.Module, noisy: torch.Tensor, clean: torch.Tensor) -> float:
    """PSNR of ``model``'s estimate of ``clean`` from ``noisy`` (no gradients)."""
    return psnr(model(noisy), clean)


@torch.no_grad()
def noisy_psnr(
    model: torch.nn.Module, clean: torch.Tensor, sigma: float, generator: torch.Generator
) -> tuple[float, float]:
    """``(PSNR of the denoised, PSNR of the noisy input)`` of ``clean`` with Gaussian noise
    ``sigma``/255 drawn from ``generator``."""
    y = clean + sigma / 255 * torch.randn(clean.shape, generator=generator)
    return denoised_psnr(model, y, clean), psnr(y, clean)
