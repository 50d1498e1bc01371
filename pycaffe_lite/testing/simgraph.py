"""CUDA graphs on the simulated device (:mod:`.simdevice`).

A real capture records the work without running it and cannot copy between host and device
or synchronise; its replay runs the recorded work with no Python in between. Simulated, a
capture runs the work once with every host crossing forbidden (what would cross raises
:class:`~pycaffe_lite.testing.simdevice.HostTransferError` where it happens, as a real capture
fails there), and ``launch()`` runs it again under the same rule. The device counts both
(``graph_captures``, ``graph_launches``).
"""


class SimulatedGraph:
    def __init__(self, dev, fn, kinds):
        self._dev, self._fn, self._kinds = dev, fn, kinds

    def launch(self):
        with self._dev.forbid(*self._kinds):
            self._fn()
        self._dev.graph_launches += 1


def capture(dev, fn, kinds):
    with dev.forbid(*kinds):
        fn()
    dev.graph_captures += 1
    return SimulatedGraph(dev, fn, kinds)
