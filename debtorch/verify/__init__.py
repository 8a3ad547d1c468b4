"""debtorch verify-train: baseline (PyTorch's defaults) against tuned settings
on a real training loop, measured honestly (docs/verify-train.md).

Torch-free: every trial runs in a worker process of the target interpreter
through the training engine shared with ``debtorch tune``
(:mod:`debtorch.train.runner`, through :mod:`debtorch.transport`).  The modules:

* :mod:`debtorch.verify.analysis`: pure functions from trial results to
  medians, spreads, speed-up, instrumentation cost, loss-curve comparison and
  the verdict line;
* :mod:`debtorch.verify.measure`: the plan (interleaved rounds, convergence
  runs, the multi-process run) and its execution through a worker;
* :mod:`debtorch.verify.failures`: failures turned into findings (the
  doctor's ids, what fits after an out-of-memory);
* :mod:`debtorch.verify.run`: one run from its options: checks, the config,
  this machine, the tuned settings, the outcome.

What is shown: :mod:`debtorch.report.verify` and :mod:`debtorch.report.plot`.
"""
