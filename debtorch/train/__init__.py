"""Training: settings (torch-free), the engine and workloads (run inside the
target interpreter, which has torch), and the parent-side runner."""
