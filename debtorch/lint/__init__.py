"""``debtorch lint``: the article's code-level advice, checked in a training script (docs/lint.md).

* :mod:`debtorch.lint.api`: lint text, files and folders (``lint_paths``);
* :mod:`debtorch.lint.checks`: the rules (their ids, messages and fixes: checks/findings/lint.toml);
* :mod:`debtorch.lint.script`: what a file's training loops run per step, and what names hold;
* :mod:`debtorch.lint.measured`: verify-train's host waits per step read from the code (on CUDA the
  training worker counts them instead, with :mod:`debtorch.hostwaits`).
"""
