"""Compatibility shims."""
