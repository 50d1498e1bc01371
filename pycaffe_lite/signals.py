"""What a training run does on SIGINT (Ctrl-C) and SIGHUP, as ``caffe train`` does.

The handler only records the signal; the solver asks :meth:`SignalHandler.get_action` between
iterations (and between test batches) and acts on the answer: ``stop`` ends training (the solver
then writes its final snapshot, as ``snapshot_after_train`` asks), ``snapshot`` writes a
snapshot and goes on, ``none`` ignores the signal. A second SIGINT while a stop is pending
interrupts at once (KeyboardInterrupt).
"""

import signal
import threading

from .errors import CaffeError


class SolverAction:
    NONE = "none"
    STOP = "stop"
    SNAPSHOT = "snapshot"

    ALL = (NONE, STOP, SNAPSHOT)


def parse_effect(value, flag):
    if value not in SolverAction.ALL:
        raise CaffeError("invalid signal effect \"%s\" for %s: use stop, snapshot or none"
                         % (value, flag))
    return value


class SignalHandler:
    """Install SIGINT/SIGHUP handlers for the duration of a ``with`` block."""

    def __init__(self, sigint_effect=SolverAction.STOP, sighup_effect=SolverAction.SNAPSHOT):
        self.sigint_effect = parse_effect(sigint_effect, "--sigint_effect")
        self.sighup_effect = parse_effect(sighup_effect, "--sighup_effect")
        self._got_sigint = False
        self._got_sighup = False
        self._sigint_count = 0
        self._previous = {}

    def _on_sigint(self, signum, frame):
        self._sigint_count += 1
        if self._sigint_count > 1 and self.sigint_effect == SolverAction.STOP:
            raise KeyboardInterrupt
        self._got_sigint = True

    def _on_sighup(self, signum, frame):
        self._got_sighup = True

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            return self  # signal handlers can only be installed from the main thread
        self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._on_sigint)
        if hasattr(signal, "SIGHUP"):
            self._previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._on_sighup)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        return False

    def get_action(self):
        """The action requested since the last call, and reset it: SIGHUP's first, then
        SIGINT's, as Caffe's CheckForSignals (both pending: the snapshot asked by SIGHUP is
        written before SIGINT stops)."""
        if self._got_sighup:
            self._got_sighup = False
            return self.sighup_effect
        if self._got_sigint:
            self._got_sigint = False
            return self.sigint_effect
        return SolverAction.NONE
