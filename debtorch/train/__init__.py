"""Training: settings (torch-free), the engine, its worker and workloads (run inside the
target interpreter, which has torch), and the parent-side runner (through :mod:`debtorch.transport`)."""
