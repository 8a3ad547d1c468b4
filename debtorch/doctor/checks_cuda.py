"""Checks: cuda (filled once the NVIDIA facts and the knowledge tables land)."""
