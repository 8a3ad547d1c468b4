"""A workload module that cannot be imported (its dependency is missing)."""
import debtorch_no_such_dependency  # noqa: F401


def make():
    raise AssertionError("never reached")
