"""Measured runs: measurement files, validate and calibrate, published tables, the torch harness."""
