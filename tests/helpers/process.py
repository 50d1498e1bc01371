"""Helpers for tests that run real processes."""

import signal


def as_at_a_terminal():
    """``preexec_fn`` for a child that the test will interrupt: SIGINT at its default
    disposition, as a script started at a terminal has it. (A shell without job control starts
    background jobs with SIGINT ignored, and Python then installs no KeyboardInterrupt
    handler, so a test run from such a job would send its Ctrl-C into the void.)"""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
