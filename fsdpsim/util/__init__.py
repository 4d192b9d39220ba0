"""Helpers every layer may use: the one error type, number and file readers, units, output."""
