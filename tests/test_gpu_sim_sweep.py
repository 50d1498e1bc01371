"""GPU mode on the simulated device: CUDA graph replays against layer-by-layer runs and CPU
mode, where a replay once silently computed something else than the eager iteration.

The reference of each training run is the same run in CPU mode (NumPy's float32 arithmetic,
the update's steps on the host) or the same run with graphs off; the simulated capture is as
strict as a real one (:mod:`pycaffe_lite.testing.simgraph`).
"""

import numpy as np
import pytest

from pycaffe_lite.testing import simgraph
from pycaffe_lite.testing.simdevice import simulated_device


# ---- the simulated replay itself ---------------------------------------------------------------
def test_a_replay_whose_python_takes_another_branch_fails():
    """A real replay runs the captured operations: a Python branch on a host value that
    changed since the capture is not taken again. The simulated replay, which runs the
    Python again, refuses to follow it (it used to compute the new branch silently)."""
    with simulated_device() as dev:
        a = dev.ones(3, np.float32)
        out = dev.zeros(3, np.float32)
        mode = ["L2"]

        def work():
            out[...] = dev.sign(a) if mode[0] == "L1" else a * 2

        graph = dev.capture_graph(work)
        graph.launch()
        np.testing.assert_array_equal(out.get(), [2, 2, 2])
        mode[0] = "L1"
        with pytest.raises(simgraph.GraphReplayError,
                           match=r"device operation sign at .*test_gpu_sim_sweep.py.* where the "
                                 r"capture ran multiply"):
            graph.launch()
        mode[0] = "L2"
        graph.launch()  # the captured branch again: fine
        np.testing.assert_array_equal(out.get(), [2, 2, 2])


def test_a_replay_that_skips_an_operation_fails():
    with simulated_device() as dev:
        a = dev.ones(3, np.float32)
        steps = [2]

        def work():
            for _ in range(steps[0]):
                a.__iadd__(1)

        graph = dev.capture_graph(work)
        graph.launch()
        steps[0] = 1
        with pytest.raises(simgraph.GraphReplayError, match="asked for 1 device operations, "
                                                             "the capture ran 2"):
            graph.launch()
