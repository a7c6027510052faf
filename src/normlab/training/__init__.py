"""Training: the one loop (:mod:`normlab.training.fit`) and the trainers built on it.

- :mod:`~normlab.training.fit`: :func:`~normlab.training.fit.fit`, every optimizer step
  normlab takes; a non-finite loss stops the run and is returned as a
  :class:`~normlab.training.fit.Divergence` (step, last finite loss), never raised.
- :mod:`~normlab.training.lm`: TinyGPT on the byte corpus, with a shared trained-model cache.
- :mod:`~normlab.training.classifier`: cross-entropy classifiers on in-memory tensors.
- :mod:`~normlab.training.macro`: norm-free TinyGPT under MACRO or AdamW, its scale probed.
- :mod:`~normlab.training.forecast`: a reversible normalizer around a forecasting backbone.
- :mod:`~normlab.training.norin`: NoRIN's shape selection around the forecasting trainer.
- :mod:`~normlab.training.policy`: REINFORCE, PPO and bandit policy gradients (RL claims).
- :mod:`~normlab.training.curves`: per-epoch validation and test accuracy of a classifier.
- :mod:`~normlab.training.flows`: maximum-likelihood training of a CDFlow.
- :mod:`~normlab.training.bandits`: the preference and biased-proxy bandits (GRPO family).
- :mod:`~normlab.training.distill`: teacher-student self-distillation (SSL centering).
- :mod:`~normlab.training.modular`: sparse modular addition with per-step norm curvature.
- :mod:`~normlab.training.unlearn`: gradient-ascent / NegGrad+ unlearning to a stop accuracy.
"""

__all__: list[str] = []  # import the submodules themselves (normlab.training.fit, ...)
