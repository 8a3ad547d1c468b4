"""Command functions registered in debtorch/cli.py, one module per command."""
