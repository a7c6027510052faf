"""Small reference models that claims train and probe."""

__all__: list[str] = []  # import the submodules themselves (normlab.models.gpt, ...)
