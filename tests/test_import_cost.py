"""``import pycaffe_lite`` and ``pycaffe-lite <command>`` load only what they use: the face's
names load on first use, the heavy and optional parts (nets, solvers, importers, exporters,
GPU code, NumPy itself) when something asks for them, and a command imports its own module
alone. Every name the face offered when it imported everything still resolves."""

import json
import os
import subprocess
import sys
import types

import pytest

import pycaffe_lite as caffe
from pycaffe_lite import cli, commands

# dir(pycaffe_lite) of the package that imported its whole face at once (public names)
PUBLIC_NAMES = [
    "AdaDeltaSolver", "AdaGradSolver", "AdamSolver", "Blob", "CaffeError", "Classifier",
    "Detector", "Layer", "NCCL", "NesterovSolver", "Net", "NetSpec", "RMSPropSolver",
    "SGDSolver", "TEST", "TRAIN", "Timer", "backend", "blob", "caffe_pb2", "classifier",
    "cuda_graphs", "detector", "draw", "errors", "frozen", "get_solver", "has_nccl", "health",
    "init_log", "io", "layer", "layer_type_list", "layers", "log", "net", "net_batches",
    "net_blocked", "net_fold", "net_graph", "net_int8", "net_memory", "net_spec",
    "net_train_fuse", "net_types", "ops", "os", "parallel", "params", "plugins", "profiling",
    "proto", "python_layers", "quantize", "ranks", "register_layer", "registry",
    "set_allow_tf32", "set_cuda_graph", "set_device", "set_mode_cpu", "set_mode_gpu",
    "set_multiprocess", "set_random_seed", "set_share_diffs", "set_solver_count",
    "set_solver_rank", "signals", "solver_count", "solver_rank", "solvers", "switches",
    "syncedmem", "sys", "to_proto"]
# its __all__
ALL_NAMES = [
    "AdaDeltaSolver", "AdaGradSolver", "AdamSolver", "Blob", "CaffeError", "Classifier",
    "Detector", "Layer", "NCCL", "NesterovSolver", "Net", "NetSpec", "RMSPropSolver",
    "SGDSolver", "TEST", "TRAIN", "Timer", "__version__", "caffe_pb2", "draw", "get_solver",
    "has_nccl", "init_log", "io", "layer_type_list", "layers", "log", "net_spec", "params",
    "quantize", "register_layer", "set_allow_tf32", "set_cuda_graph", "set_device",
    "set_mode_cpu", "set_mode_gpu", "set_multiprocess", "set_random_seed", "set_share_diffs",
    "set_solver_count", "set_solver_rank", "solver_count", "solver_rank", "to_proto"]

# loaded by none of `import pycaffe_lite`, nor by a command that does not need them
HEAVY = ["numpy", "google.protobuf", "pycaffe_lite.net", "pycaffe_lite.backend",
         "pycaffe_lite.blob", "pycaffe_lite.layers", "pycaffe_lite.ops",
         "pycaffe_lite.proto.caffe_pb2", "pycaffe_lite.solvers", "pycaffe_lite.parallel",
         "pycaffe_lite.onnx", "pycaffe_lite.pytorch", "pycaffe_lite.darknet",
         "pycaffe_lite.mxnet", "pycaffe_lite.quantization", "pycaffe_lite.tensorboard",
         "pycaffe_lite.io", "pycaffe_lite.draw", "onnx", "onnxruntime", "torch", "cupy",
         "mpi4py", "h5py", "PIL", "scipy", "cv2", "lmdb"]


def loaded_after(code, env=None):
    """The modules of HEAVY (and pycaffe_lite.commands.*) that a fresh interpreter has after
    running ``code``; its standard error too."""
    probe = (code + "\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m in "
             + repr(HEAVY) + " or m.startswith('pycaffe_lite.commands.'))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_import_loads_no_heavy_module():
    loaded, stderr = loaded_after("import pycaffe_lite")
    assert loaded == []
    assert stderr == ""


def test_every_public_name_still_resolves():
    assert sorted(caffe.__all__) == sorted(ALL_NAMES)
    for name in PUBLIC_NAMES + ALL_NAMES:
        assert getattr(caffe, name) is not None, name
        assert name in dir(caffe), name
    from pycaffe_lite import net, net_spec, parallel, solvers
    from pycaffe_lite.proto import caffe_pb2
    assert caffe.Net is net.Net and (caffe.TRAIN, caffe.TEST) == (0, 1)
    assert caffe.caffe_pb2 is caffe_pb2 and caffe.proto.caffe_pb2 is caffe_pb2
    assert caffe.SGDSolver is solvers.SGDSolver and caffe.NCCL is parallel.NCCL
    assert isinstance(caffe.layers, net_spec.Layers) and caffe.params is net_spec.params
    assert isinstance(caffe.io, types.ModuleType) and caffe.io.Transformer is not None
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        caffe.no_such_name  # noqa: B018


def test_star_import_gives_all_names_in_a_fresh_process():
    code = ("from pycaffe_lite import *\n"
            "import pycaffe_lite, pycaffe_lite.net_spec as ns\n"
            "missing = [n for n in pycaffe_lite.__all__ if n not in globals()]\n"
            "assert not missing, missing\n"
            "assert isinstance(layers, ns.Layers) and Net.__name__ == 'Net'\n")
    loaded, _ = loaded_after(code)
    assert "pycaffe_lite.net" in loaded


@pytest.mark.parametrize("first", [
    "import pycaffe_lite.layers",
    "import pycaffe_lite as caffe; caffe.Net",
    "from pycaffe_lite.layers.neuron import relu_layer",
    "import pycaffe_lite.net"])
def test_caffe_layers_stays_net_spec_layers_whatever_loads_first(first):
    # the import system binds the subpackage pycaffe_lite.layers to the package's attribute
    # when it first loads; caffe.layers must stay pycaffe's net_spec.layers
    code = (first + "\nimport pycaffe_lite as caffe, pycaffe_lite.net_spec as ns\n"
            "assert isinstance(caffe.layers, ns.Layers), caffe.layers\n"
            "assert caffe.layers.create_layer is sys.modules['pycaffe_lite.layers'].create_layer\n"
            "n = caffe.NetSpec(); n.data = caffe.layers.Input(shape=dict(dim=[1, 2]))\n"
            "assert 'type: \"Input\"' in str(n.to_proto())\n")
    loaded_after("import sys\n" + code)


def test_caffe_layers_can_still_be_replaced(monkeypatch):
    replacement = types.ModuleType("my_layers")
    monkeypatch.setattr(caffe, "layers", replacement)
    assert caffe.layers is replacement


def test_registry_is_filled_before_it_is_read_in_a_fresh_process():
    # the layer modules register their types on import: reading the list loads them first
    code = ("import pycaffe_lite as caffe\n"
            "names = caffe.layer_type_list()\n"
            "assert {'Convolution', 'ReLU', 'Python', 'PriorBox', 'LSTM'} <= set(names), names\n")
    loaded_after(code)


RELU_NET = ('input: "x" input_shape { dim: 1 dim: 3 }\n'
            'layer { name: "r" type: "%s" bottom: "x" top: "y" }\n')


def one_layer_net(tmp_path, layer_type):
    """The path of RELU_NET with its layer of ``layer_type``."""
    proto = tmp_path / "net.prototxt"
    proto.write_text(RELU_NET % layer_type)
    return str(proto)


def stdout_of(code):
    """What a fresh interpreter prints running ``code`` (which must exit 0)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=300).stdout


def test_a_net_builds_in_a_fresh_process_that_only_imported_the_face(tmp_path):
    proto = one_layer_net(tmp_path, "ReLU")
    code = ("import pycaffe_lite as caffe, numpy as np\n"
            "net = caffe.Net(%r, caffe.TEST)\n"
            "net.blobs['x'].data[...] = [[-1.0, 0.5, 2.0]]\n"
            "assert net.forward()['y'].tolist() == [[0.0, 0.5, 2.0]]\n") % proto
    loaded, _ = loaded_after(code)
    # a CPU net needs none of the optional packages, training, or the converters
    assert [m for m in loaded if m.split(".")[0] != "pycaffe_lite" and m not in (
        "numpy", "google.protobuf")] == []
    for package in ("solvers", "parallel", "onnx", "pytorch", "mxnet", "darknet",
                    "quantization", "tensorboard", "io", "draw"):
        assert "pycaffe_lite." + package not in loaded, package


def test_a_net_imports_only_the_layer_modules_of_its_types(tmp_path):
    proto = one_layer_net(tmp_path, "ReLU")
    code = ("import sys, pycaffe_lite as caffe\n"
            "net = caffe.Net(%r, caffe.TEST)\n"
            "assert 'pycaffe_lite.layers.neuron.relu_layer' in sys.modules\n"
            "for m in ('pycaffe_lite.layers.detection.prior_box_layer',\n"
            "          'pycaffe_lite.layers.recurrent.lstm_layer',\n"
            "          'pycaffe_lite.layers.data.data_layer',\n"
            "          'pycaffe_lite.layers.loss.multibox_loss_layer'):\n"
            "    assert m not in sys.modules, m\n") % proto
    loaded_after(code)


def test_the_modules_read_from_source_are_the_ones_that_register():
    # the reference: each registered class's own module, once every module has loaded
    code = ("import json, pycaffe_lite.layers as L\n"
            "from pycaffe_lite.registry import LAYERS\n"
            "read = L.built_in_modules()\n"
            "L.load_all()\n"
            "print(json.dumps([read, {n: c.__module__ for n, c in LAYERS.items()}]))\n")
    read, registered = json.loads(stdout_of(code))
    assert read == registered
    assert read["Python"] == "pycaffe_lite.layers.common.python_layer"  # NAME = "Python"
    assert read["ReLU"] == "pycaffe_lite.layers.neuron.relu_layer"


def test_a_plugin_that_takes_a_built_in_types_name_is_still_refused(tmp_path):
    # every built-in module used to load with the first net, and the clash was an error then,
    # whichever types the net used
    proto = one_layer_net(tmp_path, "ReLU")
    code = ("import pycaffe_lite as caffe\n"
            "@caffe.register_layer('PriorBox')\n"
            "class Mine(caffe.Layer):\n    pass\n"
            "try:\n    caffe.Net(%r, caffe.TEST)\n"
            "except caffe.CaffeError as e:\n    print('refused:', e)\n") % proto
    out = stdout_of(code)
    assert "refused: layer type 'PriorBox' is already registered" in out


def test_an_unknown_type_still_names_every_built_in_type(tmp_path):
    proto = one_layer_net(tmp_path, "Relu")
    code = ("import pycaffe_lite as caffe\n"
            "try:\n    caffe.Net(%r, caffe.TEST)\n"
            "except caffe.CaffeError as e:\n    print(e)\n") % proto
    out = stdout_of(code)
    assert "unknown layer type 'Relu'" in out and "did you mean 'ReLU'" in out
    known = out.split("Known types: ")[1]
    for name in ("PriorBox", "LSTM", "Data", "MultiBoxLoss", "Python", "Convolution"):
        assert name in known, name


@pytest.mark.parametrize("variable, value, message", [
    ("PYCAFFE_LITE_CPU_KERNELS", "maybe", "PYCAFFE_LITE_CPU_KERNELS='maybe' is none of"),
    ("PYCAFFE_LITE_GEMM_SPLIT", "2", "PYCAFFE_LITE_GEMM_SPLIT='2' is none of"),
    ("PYCAFFE_LITE_CPU_THREADS", "many",
     "PYCAFFE_LITE_CPU_THREADS='many' is not a positive whole number"),
    ("PYCAFFE_LITE_CPU_THREADS", "5000", "PYCAFFE_LITE_CPU_THREADS='5000' asks for more than"),
    ("OMP_NUM_THREADS", "0,2", "OMP_NUM_THREADS='0,2' is not a positive whole number"),
    ("PYCAFFE_LITE_BLOCKED_ISA", "avx1024", "PYCAFFE_LITE_BLOCKED_ISA='avx1024' is none of"),
    ("PYCAFFE_LITE_GPU_KERNELS", "sometimes", "PYCAFFE_LITE_GPU_KERNELS='sometimes' is none of"),
    ("PYCAFFE_LITE_CUDA_GRAPH", "x", "PYCAFFE_LITE_CUDA_GRAPH='x' is none of")])
def test_a_setting_read_at_import_is_still_warned_about_at_import(variable, value, message):
    env = {"PYCAFFE_LITE_CPU_THREADS": "", "OMP_NUM_THREADS": "", variable: value}
    _, stderr = loaded_after("import pycaffe_lite", env)
    assert stderr.count(message) == 1, stderr


def test_good_settings_leave_the_import_light():
    env = {"PYCAFFE_LITE_CPU_KERNELS": "off", "PYCAFFE_LITE_GEMM_SPLIT": "Yes",
           "PYCAFFE_LITE_CPU_THREADS": "2", "OMP_NUM_THREADS": "3,1",
           "PYCAFFE_LITE_BLOCKED_ISA": "AVX2", "PYCAFFE_LITE_GPU_KERNELS": "0",
           "PYCAFFE_LITE_CUDA_GRAPH": "true"}
    loaded, stderr = loaded_after("import pycaffe_lite", env)
    assert loaded == [] and stderr == ""
    # and they still take effect when their modules load
    code = ("import pycaffe_lite as caffe, pycaffe_lite.ops.cpu as c, pycaffe_lite.cuda_graphs "
            "as g, pycaffe_lite.ops.cpu.blocked as b\n"
            "assert (c._enabled[0], c._gemm_split[0], c.threads(), g.enabled(), b._isa[0]) == "
            "(False, True, 2, True, 'avx2'), (c._enabled, c._gemm_split, c.threads(), b._isa)\n")
    loaded_after(code, env)


# ---- the command line -----------------------------------------------------------------------

def test_the_table_of_commands_matches_the_modules():
    declared = {}
    for stem in sorted(set(commands.MODULE_OF.values())
                       | {m.rpartition(".")[2] for m in _command_modules()}):
        module = __import__("pycaffe_lite.commands." + stem, fromlist=["COMMANDS"])
        for entry in getattr(module, "COMMANDS", []):
            declared[entry[0]] = stem
    assert commands.MODULE_OF == declared
    # the one-line help of each, in the order the whole parser lists them
    assert list(commands.TABLE.items()) == [
        (name, (commands.MODULE_OF[name], help_text))
        for name, help_text, _, _ in commands.all_commands()]


def _command_modules():
    import pkgutil

    return ["pycaffe_lite.commands." + i.name for i in pkgutil.iter_modules(commands.__path__)]


def test_one_commands_parser_is_the_same_as_in_the_whole_parser():
    whole = cli.build_parser()
    for name in commands.MODULE_OF:
        alone = cli.build_parser(name)
        assert list(alone.command_parsers) == [name]
        assert alone.command_parsers[name].format_help() == \
            whole.command_parsers[name].format_help(), name


@pytest.mark.parametrize("argv, module", [
    (["upgrade_net_proto_text", "--help"], "pycaffe_lite.commands.upgrade"),
    (["device_query", "--help"], "pycaffe_lite.commands.device_query"),
    (["train", "--help"], "pycaffe_lite.commands.train")])
def test_a_command_imports_its_own_module_alone(argv, module):
    code = ("from pycaffe_lite import cli\n"
            "try:\n    cli.main(%r)\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
            % (argv,))
    loaded, _ = loaded_after(code)
    commands_loaded = [m for m in loaded if m.startswith("pycaffe_lite.commands.")]
    assert commands_loaded in ([module], [module, "pycaffe_lite.commands.flags"])
    for heavy in ("pycaffe_lite.onnx", "pycaffe_lite.pytorch", "pycaffe_lite.mxnet",
                  "pycaffe_lite.darknet", "pycaffe_lite.quantization", "torch", "onnx",
                  "onnxruntime", "cv2", "h5py"):
        assert heavy not in loaded, heavy


def test_upgrading_a_prototxt_loads_no_net_or_kernels(tmp_path):
    source = tmp_path / "old.prototxt"
    source.write_text('name: "n"\nlayers { name: "r" type: RELU bottom: "x" top: "x" }\n')
    target = tmp_path / "new.prototxt"
    code = ("from pycaffe_lite import cli\n"
            "assert cli.main(['upgrade_net_proto_text', %r, %r]) == 0\n"
            % (str(source), str(target)))
    loaded, _ = loaded_after(code)
    assert 'type: "ReLU"' in target.read_text()
    for heavy in ("pycaffe_lite.net", "pycaffe_lite.ops", "pycaffe_lite.layers",
                  "pycaffe_lite.solvers"):
        assert heavy not in loaded, heavy


def test_no_command_or_an_unknown_one_still_lists_them_all(capsys):
    with pytest.raises(SystemExit):
        cli.main(["no_such_command"])
    err = capsys.readouterr().err
    assert "invalid choice: 'no_such_command'" in err
    for name in ("train", "upgrade_net_proto_text", "export_onnx"):
        assert name in err


@pytest.mark.parametrize("argv", [["--help"], ["-h"], [], ["no_such_command"], ["--version"]])
def test_the_list_of_commands_imports_no_command_module(argv):
    # --help, no command, an unknown one: every command named with its help, none imported
    code = ("from pycaffe_lite import cli\n"
            "try:\n    cli.main(%r)\nexcept SystemExit as e:\n    print(e.code)\n" % (argv,))
    loaded, _ = loaded_after(code)
    assert loaded == []


def test_help_is_the_whole_parsers_help(capsys):
    whole = cli.build_parser().format_help()
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out == whole
    for name, help_text, _, _ in commands.all_commands():
        assert name in out and help_text.split()[0] in out, name


def test_a_flag_before_the_command_is_still_that_commands_error(capsys):
    # the command is found after the flag, and its own parser reports the flag
    with pytest.raises(SystemExit) as done:
        cli.main(["-x", "upgrade_net_proto_text", "a", "b"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "pycaffe-lite upgrade_net_proto_text: error: unrecognized arguments: -x" in err
