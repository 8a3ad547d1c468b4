"""debtorch's own version (read by the build, hatch's [tool.hatch.version]); imports nothing."""

__version__ = "0.1.0"
