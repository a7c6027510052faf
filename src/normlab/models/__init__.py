"""Small reference models that claims train and probe."""
