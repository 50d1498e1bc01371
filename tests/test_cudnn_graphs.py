"""The cuDNN frontend graph cache (pycaffe_lite/ops/gpu/cudnn_graphs.py) on every machine: a
stand-in for NVIDIA's frontend records what the cache asks of it, so the cache's decisions (one
graph per key, the fastest plan kept, the float32 rule, plans that fail, configurations cuDNN
cannot run) are checked without a GPU. tests/test_gpu_cudnn.py runs the real frontend."""

import logging
import types

import numpy as np
import pytest

from pycaffe_lite.ops.gpu import cudnn_graphs as graphs


class FakeTensor:
    def __init__(self, graph, name):
        self.graph, self.name = graph, name
        self.dim = self.stride = self.data_type = None
        self.output = False

    def set_output(self, flag):
        self.output = flag
        return self

    def set_dim(self, dim):
        self.dim = dim
        return self

    def set_stride(self, stride):
        self.stride = stride
        return self

    def set_data_type(self, dtype):
        self.data_type = dtype
        return self


class FakeGraph:
    """Records the calls; ``plans`` workspace sizes per plan index (None: the plan was not
    built); ``refuse``: check_support raises."""

    def __init__(self, fe, **kwargs):
        self.fe, self.kwargs, self.calls = fe, kwargs, []
        fe.graphs.append(self)

    def _t(self, name):
        return FakeTensor(self, name)

    def tensor(self, name, dim, stride, data_type):
        t = self._t(name)
        t.dim, t.stride, t.data_type = dim, stride, data_type
        return t

    def conv_fprop(self, image, weight, **geometry):
        self.calls.append(("conv_fprop", geometry))
        return self._t("y")

    def conv_dgrad(self, loss, filter, **geometry):
        self.calls.append(("conv_dgrad", geometry))
        return self._t("dx")

    def conv_wgrad(self, image, loss, **geometry):
        self.calls.append(("conv_wgrad", geometry))
        return self._t("dw")

    def bias(self, input, bias, compute_data_type):
        self.calls.append(("bias",))
        return self._t("yb")

    def relu(self, input, compute_data_type):
        self.calls.append(("relu",))
        return self._t("yr")

    def validate(self):
        self.calls.append(("validate",))

    def build_operation_graph(self):
        self.calls.append(("build_operation_graph",))

    def create_execution_plans(self, heuristics):  # the real frontend's parameter name
        self.calls.append(("create_execution_plans", tuple(heuristics)))
        if set(heuristics) & self.fe.unqueryable:
            raise RuntimeError("heuristics query failed")

    def deselect_numeric_notes(self, notes):
        self.calls.append(("deselect_numeric_notes", tuple(notes)))

    def check_support(self):
        if self.fe.refuse:
            raise RuntimeError("no engine supports this graph")

    def build_plans(self, policy):
        self.calls.append(("build_plans", policy))

    def get_execution_plan_count(self):
        return len(self.fe.plans)

    def get_workspace_size_plan_at_index(self, index):
        size = self.fe.plans[index]
        if size is None:
            raise RuntimeError("plan %d was not built" % index)
        return size

    def execute_plan_at_index(self, pack, workspace, index, handle=None):
        self.fe.executed.append((index, dict((t.name, p) for t, p in pack.items()), workspace))


def fake_frontend(plans=(0, 64, None, 16), refuse=False):
    fe = types.SimpleNamespace(
        data_type=types.SimpleNamespace(FLOAT="FLOAT", HALF="HALF", DOUBLE="DOUBLE"),
        heur_mode=types.SimpleNamespace(A="A", B="B", FALLBACK="FALLBACK"),
        numerical_note=types.SimpleNamespace(TENSOR_CORE="TC", DOWN_CONVERT_INPUTS="DC",
                                             REDUCED_PRECISION_REDUCTION="RPR"),
        build_plan_policy=types.SimpleNamespace(ALL="ALL", HEURISTICS_CHOICE="HEUR"),
        plans=list(plans), refuse=refuse, graphs=[], executed=[], unqueryable=set())
    fe.pygraph = lambda **kw: FakeGraph(fe, **kw)
    return fe


def key(kind=graphs.FPROP, dtype=np.float32, x=(2, 4, 9, 8)):
    return graphs.Key.make(kind, x, (4, 2, 3, 3), (2, 4, 5, 4), (1, 1), (2, 2), (1, 1), dtype, 0)


@pytest.fixture(autouse=True)
def settings():
    old_tf32, old_tune = graphs.allow_tf32(), graphs.set_autotune(True)
    old_heuristics = graphs.set_heuristics(graphs.DEFAULT_HEURISTICS)
    yield
    graphs.set_allow_tf32(old_tf32)
    graphs.set_autotune(old_tune)
    graphs.set_heuristics(old_heuristics)


def timings(table):
    """A timer answering from ``table`` (plan index -> ms; an index not there fails)."""
    seen = []

    def timer(graph, index, pack, workspace):
        seen.append(index)
        if index not in table:
            raise RuntimeError("launch failed")
        return table[index]
    timer.seen = seen
    return timer


def test_a_graph_is_built_once_per_key_and_the_fastest_plan_kept():
    fe, cache = fake_frontend(), graphs.GraphCache()
    timer = timings({0: 3.0, 1: 1.5, 3: 2.0})
    plan = cache.plan(fe, key(), None, [11, 22, 33], lambda size: 1000 + size, timer)
    # plan 2 was not built: never timed; 1 is the fastest of 0, 1, 3
    assert timer.seen == [0, 1, 3]
    assert plan.index == 1 and plan.workspace == 64
    assert plan.timings == {0: 3.0, 1: 1.5, 3: 2.0}
    again = cache.plan(fe, key(), None, [44, 55, 66], lambda size: 0, timings({}))
    assert again is plan and cache.builds == 1 and len(fe.graphs) == 1
    cache.plan(fe, key(x=(3, 4, 9, 8)), None, [1, 2, 3], lambda size: 0, timings({0: 1.0}))
    assert cache.builds == 2 and len(cache) == 2


def test_the_graph_names_the_geometry_and_the_output_layout():
    fe = fake_frontend()
    graphs.GraphCache().plan(fe, key(graphs.DGRAD), None, [1, 2, 3], lambda s: 0,
                             timings({0: 1.0}))
    g = fe.graphs[0]
    conv = [c for c in g.calls if c[0] == "conv_dgrad"][0]
    assert conv[1]["padding"] == [1, 1] and conv[1]["stride"] == [2, 2]
    assert conv[1]["dilation"] == [1, 1] and conv[1]["compute_data_type"] == "FLOAT"
    assert ("create_execution_plans", ("A", "FALLBACK")) in g.calls


def test_float32_plans_never_round_through_tf32_unless_allowed():
    fe = fake_frontend()
    graphs.GraphCache().plan(fe, key(), None, [1, 2, 3], lambda s: 0, timings({0: 1.0}))
    assert ("deselect_numeric_notes", ("TC", "DC", "RPR")) in fe.graphs[0].calls
    fe = fake_frontend()
    graphs.set_allow_tf32(True)
    graphs.GraphCache().plan(fe, key(), None, [1, 2, 3], lambda s: 0, timings({0: 1.0}))
    assert not [c for c in fe.graphs[0].calls if c[0] == "deselect_numeric_notes"]
    # float16 computes on tensor cores whatever the switch says
    graphs.set_allow_tf32(False)
    fe = fake_frontend()
    graphs.GraphCache().plan(fe, key(dtype=np.float16), None, [1, 2, 3], lambda s: 0,
                             timings({0: 1.0}))
    assert not [c for c in fe.graphs[0].calls if c[0] == "deselect_numeric_notes"]
    assert fe.graphs[0].kwargs["io_data_type"] == "HALF"
    assert fe.graphs[0].kwargs["compute_data_type"] == "FLOAT"


def test_the_tf32_switch_is_part_of_the_key_and_drops_the_cache():
    strict = key()
    graphs.CACHE._plans[strict] = "sentinel"
    assert graphs.set_allow_tf32(True) is False
    assert len(graphs.CACHE) == 0
    assert key() != strict and key()[:8] == strict[:8]


def test_without_autotune_the_heuristics_first_built_plan_runs_untimed():
    graphs.set_autotune(False)
    fe = fake_frontend(plans=(None, 8, 4))
    timer = timings({1: 1.0, 2: 0.5})
    plan = graphs.GraphCache().plan(fe, key(), None, [1, 2, 3], lambda s: 0, timer)
    assert plan.index == 1 and timer.seen == []
    assert ("build_plans", "HEUR") in fe.graphs[0].calls


def test_a_configuration_cudnn_cannot_run_is_tried_once_and_logged(caplog):
    fe, cache = fake_frontend(refuse=True), graphs.GraphCache()
    with caplog.at_level(logging.INFO, logger="pycaffe_lite"):
        assert cache.plan(fe, key(), None, [1, 2, 3], lambda s: 0, timings({})) is None
        assert cache.plan(fe, key(), None, [1, 2, 3], lambda s: 0, timings({})) is None
    lines = [r.getMessage() for r in caplog.records if "cuDNN cannot run" in r.getMessage()]
    assert len(lines) == 1 and "fprop x[2, 4, 9, 8] w[4, 2, 3, 3]" in lines[0]
    assert "the CAFFE engine computes it" in lines[0] and cache.builds == 1


def test_when_every_plan_fails_to_launch_the_configuration_goes_to_caffe(caplog):
    fe = fake_frontend(plans=(0, 0))
    with caplog.at_level(logging.INFO, logger="pycaffe_lite"):
        plan = graphs.GraphCache().plan(fe, key(), None, [1, 2, 3], lambda s: 0, timings({}))
    assert plan is None
    assert any("every plan failed" in r.getMessage() for r in caplog.records)


def test_fused_forward_graph_adds_the_bias_then_the_relu():
    fe = fake_frontend()
    plan = graphs.GraphCache().plan(fe, key(graphs.FPROP_BIAS_RELU), None, [1, 2, 3, 4],
                                    lambda s: 0, timings({0: 1.0}))
    ops = [c[0] for c in fe.graphs[0].calls if c[0] in ("conv_fprop", "bias", "relu")]
    assert ops == ["conv_fprop", "bias", "relu"]
    # the arrays bind in the documented order: x, w, b, y (the ReLU's output, NCHW strides)
    assert [t.name for t in plan.tensors] == ["x", "w", "b", "yr"]
    assert plan.tensors[-1].output and plan.tensors[-1].stride == [80, 20, 4, 1]


def test_fused_bias_graph_adds_the_bias_alone():
    fe = fake_frontend()
    plan = graphs.GraphCache().plan(fe, key(graphs.FPROP_BIAS), None, [1, 2, 3, 4],
                                    lambda s: 0, timings({0: 1.0}))
    ops = [c[0] for c in fe.graphs[0].calls if c[0] in ("conv_fprop", "bias", "relu")]
    assert ops == ["conv_fprop", "bias"]
    assert [t.name for t in plan.tensors] == ["x", "w", "b", "yb"]
    assert plan.tensors[-1].output and plan.tensors[-1].stride == [80, 20, 4, 1]


def test_strides_are_c_order():
    assert graphs.strides((2, 3, 4, 5)) == [60, 20, 5, 1]
    assert graphs.strides((7,)) == [1]


def test_a_plan_launches_with_its_arrays_in_order():
    fe = fake_frontend()
    plan = graphs.GraphCache().plan(fe, key(graphs.WGRAD), None, [1, 2, 3], lambda s: 0,
                                    timings({0: 2.0, 3: 1.0}))
    plan.execute([7, 8, 9], 4096, None)  # a frontend without a lowered graph: its public path
    assert fe.executed[-1] == (3, {"x": 7, "dy": 8, "dw": 9}, 4096)


def test_plans_over_the_workspace_limit_are_left_out_while_others_exist():
    big = graphs.WORKSPACE_LIMIT + 1
    fe = fake_frontend(plans=(big, 64))
    timer = timings({0: 0.5, 1: 1.0})
    plan = graphs.GraphCache().plan(fe, key(), None, [1, 2, 3], lambda s: 0, timer)
    assert plan.index == 1 and timer.seen == []  # the one plan left: nothing to time
    fe = fake_frontend(plans=(big,))
    plan = graphs.GraphCache().plan(fe, key(), None, [1, 2, 3], lambda s: 0, timings({0: 1.0}))
    assert plan.index == 0 and plan.workspace == big


# ---- conv + bias (+ ReLU): the fused graph or the convolution and a separate pass -----------
class Path:
    """One way of computing the fused forward: ``runs`` (False: cuDNN has no plan), the calls
    counted, and the milliseconds the stand-in timer reports for it."""

    def __init__(self, ms, runs=True):
        self.ms, self.runs, self.calls = ms, runs, 0

    def __call__(self):
        self.calls += 1
        return self.runs


def path_timer(fn):
    return fn.ms


@pytest.fixture
def fused_choices():
    graphs.FUSED.clear()
    yield
    graphs.FUSED.clear()


@pytest.mark.parametrize("fused_ms, separate_ms, want", [(1.0, 2.0, True), (3.0, 2.0, False),
                                                          (2.0, 2.0, True)])
def test_the_faster_of_fused_and_separate_runs(fused_choices, fused_ms, separate_ms, want):
    fused, separate = Path(fused_ms), Path(separate_ms)
    k = key(graphs.FPROP_BIAS_RELU)
    assert graphs.prefer_fused(k, fused, separate, path_timer) is want
    assert fused.calls == separate.calls == 1  # each run once, then timed
    # decided once per key: later calls neither run nor time anything
    assert graphs.prefer_fused(k, Path(9.0), Path(0.1), path_timer) is want
    assert fused.calls == separate.calls == 1
    # another shape or element type is decided on its own
    other = Path(fused_ms * 10)
    assert graphs.prefer_fused(key(graphs.FPROP_BIAS_RELU, x=(3, 4, 9, 8)), other,
                               Path(separate_ms), path_timer) is False
    assert graphs.prefer_fused(key(graphs.FPROP_BIAS_RELU, np.float16), Path(0.5),
                               Path(separate_ms), path_timer) is True


def test_a_fused_graph_cudnn_cannot_run_is_never_timed(fused_choices):
    def timer(fn):
        raise AssertionError("timed")
    fused, separate = Path(1.0, runs=False), Path(2.0)
    assert graphs.prefer_fused(key(graphs.FPROP_BIAS_RELU), fused, separate, timer) is False
    assert separate.calls == 0
    # without autotuning, or where the separate path cannot run: the fused graph, untimed
    graphs.set_autotune(False)
    assert graphs.prefer_fused(key(graphs.FPROP_BIAS_RELU, x=(3, 4, 9, 8)), Path(9.0),
                               Path(1.0), timer) is True
    graphs.set_autotune(True)
    separate = Path(1.0, runs=False)
    assert graphs.prefer_fused(key(graphs.FPROP_BIAS_RELU, x=(5, 4, 9, 8)), Path(9.0),
                               separate, timer) is True
    assert separate.calls == 1


def test_new_plans_decide_again(fused_choices):
    k = key(graphs.FPROP_BIAS_RELU)
    assert graphs.prefer_fused(k, Path(3.0), Path(1.0), path_timer) is False
    old = graphs.set_allow_tf32(True)  # drops the cache: plans (and choices) are made again
    try:
        assert k not in graphs.FUSED
    finally:
        graphs.set_allow_tf32(old)


# ---- which heuristics' plans are built -------------------------------------------------------
def _modes(graph):
    return [c[1] for c in graph.calls if c[0] == "create_execution_plans"]


def test_the_heuristics_whose_plans_are_built(fused_choices):
    fe = fake_frontend()
    graphs.GraphCache().plan(fe, key(), None, [1, 2, 3], lambda s: 0, timings({0: 1.0}))
    assert _modes(fe.graphs[0]) == [("A", "FALLBACK")]
    graphs.CACHE._plans[key()] = "a built plan"
    graphs.FUSED[key(graphs.FPROP_BIAS)] = True
    assert graphs.set_heuristics(["A", "b", "fallback"]) == graphs.DEFAULT_HEURISTICS
    assert len(graphs.CACHE) == 0 and not graphs.FUSED  # chosen again with the new plans
    graphs.GraphCache().plan(fe, key(), None, [1, 2, 3], lambda s: 0, timings({0: 1.0}))
    assert _modes(fe.graphs[1]) == [("A", "B", "FALLBACK")]
    with pytest.raises(ValueError, match="some of a, b, fallback"):
        graphs.set_heuristics(["a", "c"])
    with pytest.raises(ValueError):
        graphs.set_heuristics([])


def test_a_graph_the_heuristics_cannot_query_takes_the_default_ones():
    fe = fake_frontend()
    fe.unqueryable = {"B"}
    graphs.set_heuristics(["b", "a", "fallback"])
    plan = graphs.GraphCache().plan(fe, key(), None, [1, 2, 3], lambda s: 0,
                                    timings({0: 2.0, 1: 1.0, 3: 3.0}))
    assert [_modes(g) for g in fe.graphs] == [[("B", "A", "FALLBACK")], [("A", "FALLBACK")]]
    assert plan is not None and plan.index == 1 and plan.graph is fe.graphs[1]
    # where the defaults cannot run either, the configuration goes to the CAFFE engine
    fe = fake_frontend()
    fe.unqueryable = {"B", "A"}
    assert graphs.GraphCache().plan(fe, key(), None, [1, 2, 3], lambda s: 0,
                                    timings({0: 1.0})) is None


@pytest.mark.parametrize("value,want,warns", [
    ("", graphs.DEFAULT_HEURISTICS, False), ("b", ("b",), False),
    (" A, B ,fallback", ("a", "b", "fallback"), False),
    ("instant", graphs.DEFAULT_HEURISTICS, True)])
def test_the_heuristics_from_the_environment(monkeypatch, caplog, value, want, warns):
    monkeypatch.setenv("PYCAFFE_LITE_CUDNN_HEURISTICS", value)
    with caplog.at_level(logging.WARNING, logger="pycaffe_lite"):
        assert graphs._heuristics_from_env() == want
    assert ("PYCAFFE_LITE_CUDNN_HEURISTICS=instant" in caplog.text) == warns
