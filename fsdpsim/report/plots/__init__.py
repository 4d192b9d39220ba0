"""Figures (the only matplotlib users)."""
