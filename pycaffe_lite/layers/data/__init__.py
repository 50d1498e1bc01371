"""Data layers."""
