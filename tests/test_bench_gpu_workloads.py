"""benchmarks/bench_gpu.py's training workloads (``zoo_solver``: a zoo net's SGD iteration
through the solver), run on the simulated device at batch 1: CUDA graphs capture them (the
benchmark times the replays, so an iteration that silently ran layer by layer would time
something else), and the replayed iterations leave the weights the layer-by-layer run leaves,
bit for bit."""

import os
import sys

import numpy as np
import pytest

from pycaffe_lite import backend, cuda_graphs
from pycaffe_lite.testing.simdevice import simulated_device

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
bench_gpu = pytest.importorskip("bench_gpu")

pytestmark = pytest.mark.slow
STEPS = 3  # a warm-up, the captured iteration, a replay


def train(name, graphs):
    """(the learnable params before and after STEPS iterations, the losses, the solver's
    graph, why it would not run)."""
    old = cuda_graphs.set_enabled(graphs)
    try:
        with simulated_device():
            backend.set_mode_gpu()
            try:
                solver, _ = bench_gpu.zoo_solver(name, 1)
                start = [p.data.copy() for p in solver.net.learnable_params]
                losses = []
                for _ in range(STEPS):
                    solver.step(1)
                    losses.append(solver.smoothed_loss)
                graph = solver.train_graph
                why_not = graph.why_not() if graph is not None else "no graph"
                return (start, [p.data.copy() for p in solver.net.learnable_params], losses,
                        graph, why_not)
            finally:
                backend.set_mode_cpu()
    finally:
        cuda_graphs.set_enabled(old)


@pytest.mark.parametrize("name", ["resnet50", "googlenet"])
def test_the_benchmarks_training_iteration_is_captured_and_replays_as_layer_by_layer(name):
    _, eager, eager_losses, _, _ = train(name, False)
    start, got, losses, graph, why_not = train(name, True)
    assert why_not == ""
    assert graph.captures == 1 and graph.replays == STEPS - 1
    assert losses == eager_losses and np.isfinite(losses[0]) and losses[0] > 0
    assert len(got) == len(eager) > 100
    for a, b in zip(got, eager):
        np.testing.assert_array_equal(a, b)
    # it trained: every convolution's weights moved
    assert all(not np.array_equal(a, b) for a, b in zip(start, got) if a.ndim == 4)
