"""Built-in hardware catalog data (TOML files); read only by :mod:`fsdpsim.hardware.catalog`."""
