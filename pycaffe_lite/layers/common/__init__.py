"""Common layers."""
