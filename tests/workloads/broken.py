"""A workload module that fails while being imported."""
import torch  # noqa: F401

raise RuntimeError("this module is broken on purpose\nsecond line that must not be shown")
