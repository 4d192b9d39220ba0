"""Measured training runs that ship with fsdpsim (CSV files); found by name by :mod:`fsdpsim.measured.shipped`."""
