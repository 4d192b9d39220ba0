"""Built-in model catalog data (TOML files); read only by :mod:`fsdpsim.model.catalog`."""
