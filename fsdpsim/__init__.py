"""fsdpsim: an analytical performance simulator for FSDP and hybrid-parallel LLM training."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("fsdpsim")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.1.0"

from fsdpsim.errors import ConfigError  # noqa: E402

__all__ = ["ConfigError", "__version__"]
