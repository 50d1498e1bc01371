"""Vision layers."""
