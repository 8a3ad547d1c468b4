"""``debtorch lint``: the article's code-level advice, checked in a training script (docs/lint.md).

* :mod:`debtorch.lint.api`: lint text, files and folders (``lint_paths``);
* :mod:`debtorch.lint.checks`: the rules (their ids, messages and fixes: checks/findings/lint.toml);
* :mod:`debtorch.lint.script`: what a file's training loops run per step, and what names hold;
* :mod:`debtorch.lint.measured` and :mod:`debtorch.lint.hostwaits`: verify-train's host waits per step,
  read from the code, or counted on CUDA in the training worker (``hostwaits`` is standard library
  only, for the worker, which runs in the user's interpreter without debtorch's dependencies).

This package file imports nothing, so that the worker importing ``hostwaits`` stays light.
"""
