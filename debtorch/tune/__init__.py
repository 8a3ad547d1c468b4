"""debtorch tune: training settings from the machine's facts (rules), refined
by short trials on a real workload (measurement), written to a TOML config
that training code loads with ``debtorch.load``.

Torch-free except :mod:`debtorch.tune.runtime`, which imports torch lazily.
"""
