"""Data that exists on every machine: stdlib text, wheel-shipped series, generated fields."""
