"""fsdpsim: an analytical performance simulator for FSDP and hybrid-parallel LLM training."""

from fsdpsim.util.errors import ConfigError

#: The version when fsdpsim runs from a source tree that was never installed.
SOURCE_VERSION = "0.1.0"


def __getattr__(name: str):
    """``fsdpsim.__version__``, read from the installed metadata on first use (importing
    ``importlib.metadata`` costs ~15 ms, which every command would otherwise pay at start-up)."""
    if name != "__version__":
        raise AttributeError(f"module 'fsdpsim' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("fsdpsim")
    except PackageNotFoundError:  # running from a source tree that was never installed
        value = SOURCE_VERSION
    globals()["__version__"] = value
    return value


__all__ = ["ConfigError", "__version__"]
