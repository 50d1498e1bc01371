"""Loss layers."""
