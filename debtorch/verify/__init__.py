"""debtorch verify-train: baseline (PyTorch's defaults) against tuned settings on a real training loop,
measured honestly (docs/verify-train.md), every trial in a worker of the target interpreter.
:mod:`~debtorch.verify.analysis` summarises, :mod:`~debtorch.verify.measure` plans and runs,
:mod:`~debtorch.verify.failures` turns failures into findings, :mod:`~debtorch.verify.run` is one run.
"""
