"""debtorch fleet: many machines, one verdict (docs/fleet.md): saved documents compared offline
(:mod:`~debtorch.fleet.offline`) or gathered from the ranks of a job (:mod:`~debtorch.fleet.gather`),
compared by :mod:`~debtorch.fleet.compare`, probed by :mod:`~debtorch.fleet.probe`.  This ``__init__``
imports nothing: :mod:`~debtorch.fleet.torchside` runs in the user's interpreter, where only the
standard library and torch can be counted on.
"""
