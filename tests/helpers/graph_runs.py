"""Training runs on the simulated device with CUDA graphs on or off (tests/test_train_graphs.py,
tests/test_float16_graphs.py)."""

from pycaffe_lite import backend, cuda_graphs
from pycaffe_lite.testing.simdevice import simulated_device


def run_steps(build, state_of, graphs, iters, before=None):
    """``(state_of(solver) after iters steps, the smoothed losses, the device, the solver)``
    for the solver ``build()`` makes in GPU mode on a fresh simulated device, CUDA graphs on or
    off (``before(solver)`` first); ``solver.why_not_at_end``: why its graph would not run,
    asked before GPU mode ends."""
    old = cuda_graphs.set_enabled(graphs)
    try:
        with simulated_device() as dev:
            backend.set_mode_gpu()
            try:
                solver = build()
                if before is not None:
                    before(solver)
                losses = []
                for _ in range(iters):
                    solver.step(1)
                    losses.append(solver.smoothed_loss)
                solver.why_not_at_end = solver.train_graph and solver.train_graph.why_not()
                return state_of(solver), losses, dev, solver
            finally:
                backend.set_mode_cpu()
    finally:
        cuda_graphs.set_enabled(old)
