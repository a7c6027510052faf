"""Data that exists on every machine: stdlib text, wheel-shipped series, generated fields."""

__all__: list[str] = []  # import the submodules themselves (normlab.data.corpus, ...)
