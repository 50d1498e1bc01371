"""The environment variables that turn a feature on or off read one way (switches.switch):
the same spellings everywhere, and a value that is none of them named in a warning."""

import os
import re
import subprocess
import sys

import pytest

from pycaffe_lite.switches import switch

NAME = "PYCAFFE_LITE_TEST_ONLY_SWITCH"


@pytest.mark.parametrize("value, default, expected", [
    (None, True, True), ("", False, False), ("0", True, False), ("off", True, False),
    ("No", True, False), ("FALSE", True, False), ("1", False, True), ("on", False, True),
    ("Yes", False, True), (" true ", False, True)])
def test_spellings(monkeypatch, caplog, value, default, expected):
    if value is None:
        monkeypatch.delenv(NAME, raising=False)
    else:
        monkeypatch.setenv(NAME, value)
    assert switch(NAME, default) is expected
    assert caplog.text == ""


def test_any_other_value_keeps_the_default_and_is_named(monkeypatch, caplog):
    monkeypatch.setenv(NAME, "maybe")
    assert switch(NAME) is True and switch(NAME, False) is False
    assert "PYCAFFE_LITE_TEST_ONLY_SWITCH='maybe' is none of 1, true, yes, on, 0, false, no, " \
        "off; it is ignored (the feature stays on)" in caplog.text


def test_switches_read_at_import_take_every_spelling():
    # these are read once, when their module is imported: "off" turned none of them off
    code = ("import pycaffe_lite.ops.cpu as c, pycaffe_lite.ops.cpu.convolution as v, "
            "pycaffe_lite.cuda_graphs as g, pycaffe_lite.ops.pointwise as p; "
            "print(c._enabled[0], c._gemm_split[0], v._winograd[0], g.enabled(), "
            "p._enabled[0])")
    env = dict(os.environ, PYCAFFE_LITE_CPU_KERNELS="off", PYCAFFE_LITE_GEMM_SPLIT="no",
               PYCAFFE_LITE_WINOGRAD="false", PYCAFFE_LITE_CUDA_GRAPH="Off",
               PYCAFFE_LITE_POINTWISE="on")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["False", "False", "False", "False", "True"]


def test_an_unknown_blocked_isa_is_named():
    code = "import pycaffe_lite.ops.cpu.blocked as b; print(b._isa[0])"
    env = dict(os.environ, PYCAFFE_LITE_BLOCKED_ISA="avx1024")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    assert run.stdout.split() == ["None"]
    assert "PYCAFFE_LITE_BLOCKED_ISA='avx1024' is none of avx512, avx2; it is ignored" \
        in run.stderr


# (the function's name in its errors, its module, the function, where it keeps its state,
# whether None is a value of it): the state is put back as it was after the test (a returned
# "old" setting is the effective one, which would pin what the environment chose)
SETTERS = [
    ("set_cuda_graph", "pycaffe_lite.cuda_graphs", "set_enabled", ("_settings", "enabled"),
     False),
    ("set_allow_tf32", "pycaffe_lite.ops.gpu.cudnn_graphs", "set_allow_tf32",
     ("_settings", "allow_tf32"), False),
    ("set_share_diffs", "pycaffe_lite.net_memory", "set_enabled", ("_setting", None), True),
    ("set_gemm_split", "pycaffe_lite.ops.cpu", "set_gemm_split", ("_gemm_split", 0), False),
    ("set_winograd_enabled", "pycaffe_lite.ops.cpu.convolution", "set_winograd_enabled",
     ("_winograd", 0), False),
    ("net_blocked.set_enabled", "pycaffe_lite.net_blocked", "set_enabled", ("_enabled", 0),
     True),
]


@pytest.mark.parametrize("name, module, function, state, allow_none", SETTERS,
                         ids=[s[0] for s in SETTERS])
def test_switch_functions_take_booleans_and_refuse_strings(name, module, function, state,
                                                           allow_none, monkeypatch):
    """``set_cuda_graph("off")`` turned graphs on (bool of a non-empty string): a value other
    than True/False, 0/1 or NumPy's booleans is a TypeError naming the function, and the
    setting is left as it was."""
    import importlib

    import numpy as np

    mod = importlib.import_module(module)
    attr, key = state
    if key is None:
        monkeypatch.setattr(mod, attr, getattr(mod, attr))
        restore = None
    else:
        holder = getattr(mod, attr)
        saved = holder[key]

        def restore():
            holder[key] = saved
    setter = getattr(mod, function)
    try:
        setter(False)
        # each call returns the setting before it, as a bool
        assert [setter(v) for v in (np.True_, 1, 0, False)] == [False, True, True, False]
        for bad in ("off", "False", 2, 0.5, []) + (() if allow_none else (None,)):
            with pytest.raises(TypeError, match=r"%s takes True or False.*got %s" % (
                    re.escape(name), re.escape(repr(bad)))):
                setter(bad)
            assert setter(False) is False  # unchanged by the refused value
    finally:
        if restore is not None:
            restore()
