"""The catalogue: one module per seed paper's claim, each registering itself on import.

Modules whose names start with an underscore hold helpers shared by several claims and are
not claims themselves.
"""
