"""Layers registered by modules of one's own, on the command line: ``--plugin MODULE``,
``PYCAFFE_LITE_PLUGINS`` and installed entry points of the group ``pycaffe_lite.plugins``. Every
case runs the real command in a fresh process, with the plugin modules in a folder of their
own on ``PYTHONPATH`` (and, for the entry point, a real ``*.dist-info`` there, read by
``importlib.metadata``)."""

import os
import subprocess
import sys
import textwrap

import pytest

from pycaffe_lite.proto import caffe_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# top = FACTOR * bottom: each module registers its own type and factor.
LAYER_MODULE = textwrap.dedent('''\
    import pathlib
    import pycaffe_lite as caffe

    pathlib.Path(__file__).with_suffix(".imported").write_text("imported")


    @caffe.register_layer("%(type)s")
    class Scaled(caffe.Layer):
        exact_num_bottom_blobs = 1
        exact_num_top_blobs = 1

        def reshape(self, bottom, top):
            top[0].reshape(*bottom[0].shape)

        def forward(self, bottom, top):
            top[0].write_data()[...] = %(factor)s * bottom[0].read_data()

        def backward(self, top, propagate_down, bottom):
            bottom[0].write_diff()[...] = %(factor)s * top[0].read_diff()
    ''')

# the data: 2.0 everywhere; then each plugin layer in turn
NET_HEAD = ('name: "plugged"\n'
            'layer { name: "data" type: "DummyData" top: "x0" dummy_data_param { shape { dim: 1 '
            'dim: 2 } data_filler { type: "constant" value: 2 } } }\n')


@pytest.fixture
def plugins(tmp_path):
    """A folder with three plugin modules (types TimesThree, TimesFive,
    TimesSeven) and a weights file; returns a function that writes a net using some types
    and runs a command on it in a fresh process."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    for module, type_, factor in (("timesthree", "TimesThree", 3),
                                  ("timesfive", "TimesFive", 5),
                                  ("timesseven", "TimesSeven", 7)):
        (folder / (module + ".py")).write_text(LAYER_MODULE % dict(type=type_, factor=factor))
    weights = caffe_pb2.NetParameter(name="plugged")
    weights.layer.add(name="data", type="DummyData")
    (tmp_path / "w.caffemodel").write_bytes(weights.SerializeToString())

    def run(types, *argv, env=None):
        text = NET_HEAD
        for i, type_ in enumerate(types):
            text += ('layer { name: "l%d" type: "%s" bottom: "x%d" top: "x%d" }\n'
                     % (i, type_, i, i + 1))
        (tmp_path / "net.prototxt").write_text(text)
        environ = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, str(folder)]))
        environ.pop("PYCAFFE_LITE_PLUGINS", None)
        environ.pop("PYCAFFE_LITE_ALLOW_PYTHON_LAYERS", None)
        environ.update(env or {})
        argv = [a.replace("{net}", str(tmp_path / "net.prototxt"))
                 .replace("{weights}", str(tmp_path / "w.caffemodel")) for a in argv]
        proc = subprocess.run([sys.executable, "-m", "pycaffe_lite.cli"] + argv,
                              capture_output=True, text=True, cwd=str(tmp_path), env=environ,
                              timeout=300)
        return proc

    run.folder = folder
    return run


def score(types, *extra, run, env=None):
    """``test`` over one batch of the net of ``types``; (process, the logged output values)."""
    proc = run(types, "test", "--model", "{net}", "--weights", "{weights}", "--iterations", "1",
               *extra, env=env)
    values = [float(line.rsplit("=", 1)[1]) for line in proc.stderr.splitlines()
              if "Batch 0, x%d = " % len(types) in line]
    return proc, values


def test_without_a_plugin_the_type_is_unknown_and_the_error_says_how_to_add_one(plugins):
    proc, _ = score(["TimesThree"], run=plugins)
    assert proc.returncode == 1
    assert "unknown layer type 'TimesThree'" in proc.stderr
    assert "--plugin" in proc.stderr.splitlines()[-1]


def test_plugin_flag_repeated_registers_each_modules_layers(plugins):
    proc, values = score(["TimesThree", "TimesFive"], "--plugin", "timesthree",
                         "--plugin", "timesfive", run=plugins)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert values == [2.0 * 3 * 5] * 2


@pytest.mark.parametrize("command", ["time", "summary", "train"])
def test_every_command_that_builds_nets_takes_the_flag(plugins, tmp_path, command):
    if command == "train":
        (tmp_path / "solver.prototxt").write_text(
            'net: "%s"\nbase_lr: 0.1\nlr_policy: "fixed"\nmax_iter: 1\ndisplay: 1\n'
            'snapshot_after_train: false\n' % (tmp_path / "net.prototxt"))
        argv = ["train", "--solver", str(tmp_path / "solver.prototxt")]
    else:
        argv = [command, "--model", "{net}"] + (["--iterations", "1"] if command == "time"
                                                 else [])
    assert plugins(["TimesSeven"], *argv).returncode == 1  # unknown without the plugin
    proc = plugins(["TimesSeven"], *argv, "--plugin", "timesseven")
    assert proc.returncode == 0, proc.stderr[-2000:]
    if command == "summary":
        assert "TimesSeven" in proc.stdout


def test_plugin_flag_finds_a_module_in_the_working_directory_with_the_installed_script(
        plugins, tmp_path):
    """custom-layers.md: the module may be "in the working directory". The installed
    ``pycaffe-lite`` script puts its own folder on sys.path, not the working directory (as
    ``python -m`` does): run such a script from the folder that holds the module, with nothing
    else pointing at it."""
    plugins(["TimesThree"], "--version")  # writes the net
    script = tmp_path / "bin" / "pycaffe-lite"
    script.parent.mkdir()
    script.write_text("import sys\nfrom pycaffe_lite.cli import main\nsys.exit(main())\n")
    proc = subprocess.run(
        [sys.executable, str(script), "test", "--model", str(tmp_path / "net.prototxt"),
         "--weights", str(tmp_path / "w.caffemodel"), "--iterations", "1",
         "--plugin", "timesthree"],
        capture_output=True, text=True, cwd=str(plugins.folder), timeout=300,
        env={k: v for k, v in dict(os.environ, PYTHONPATH=ROOT).items()
             if k not in ("PYCAFFE_LITE_PLUGINS", "PYCAFFE_LITE_ALLOW_PYTHON_LAYERS")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Batch 0, x1 = 6" in proc.stderr


def test_plugins_variable_names_several_modules(plugins):
    proc, values = score(["TimesFive", "TimesSeven"], run=plugins,
                         env={"PYCAFFE_LITE_PLUGINS": "timesfive, timesseven"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert values == [2.0 * 5 * 7] * 2


def _install_entry_point(folder, value):
    """A distribution 'my-layers' installed into ``folder`` (on PYTHONPATH) with one entry
    point in the group pycaffe_lite.plugins."""
    info = folder / "my_layers-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-layers\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pycaffe_lite.plugins]\nlayers = %s\n" % value)


def test_installed_entry_point_registers_its_layers(plugins):
    _install_entry_point(plugins.folder, "timesthree")
    proc, values = score(["TimesThree"], run=plugins)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert values == [6.0, 6.0]


def test_plugins_variable_and_entry_points_reach_a_net_built_from_python(plugins, tmp_path):
    _install_entry_point(plugins.folder, "timesthree")
    plugins(["TimesThree", "TimesFive"], "--version")  # writes the net
    code = ("import pycaffe_lite as caffe\nnet = caffe.Net(%r, caffe.TEST)\n"
            "print(net.forward()['x2'].tolist())" % str(tmp_path / "net.prototxt"))
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, str(plugins.folder)]),
                   PYCAFFE_LITE_PLUGINS="timesfive")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=environ, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["[[30.0,", "30.0]]"]


@pytest.mark.parametrize("how, named_by", [
    (("--plugin", "no_such_plugin_module"), "--plugin no_such_plugin_module"),
    ({"PYCAFFE_LITE_PLUGINS": "timesthree,no_such_plugin_module"},
     "PYCAFFE_LITE_PLUGINS=timesthree,no_such_plugin_module"),
    ("entry point", "entry point 'layers = no_such_plugin_module' of the group "
                    "pycaffe_lite.plugins (distribution my-layers)"),
])
def test_a_plugin_that_cannot_be_imported_is_named_with_what_named_it(plugins, how, named_by):
    if how == "entry point":
        _install_entry_point(plugins.folder, "no_such_plugin_module")
        proc, _ = score(["TimesThree"], "--plugin", "timesthree", run=plugins)
    elif isinstance(how, dict):
        proc, _ = score(["TimesThree"], run=plugins, env=how)
    else:
        proc, _ = score(["TimesThree"], *how, run=plugins)
    assert proc.returncode == 1
    last = proc.stderr.splitlines()[-1]
    assert last == ("pycaffe-lite test: error: cannot import plugin module "
                    "'no_such_plugin_module' (named by %s): ModuleNotFoundError: No module "
                    "named 'no_such_plugin_module'" % named_by), proc.stderr[-2000:]


@pytest.mark.parametrize("module,code,error,line", [
    ("broken", "import os\n\nraise RuntimeError('half-written plugin')\n",
     "RuntimeError: half-written plugin", 3),
    # 'No module named X' where X is what the plugin imports, not the plugin: the message names
    # the plugin's file and line, so that it does not read as the plugin being missing
    ("needs_dep", "import no_such_dependency_of_mine\n",
     "ModuleNotFoundError: No module named 'no_such_dependency_of_mine'", 1)])
def test_a_plugin_that_fails_on_import_is_named_with_its_error(plugins, module, code, error,
                                                               line):
    (plugins.folder / (module + ".py")).write_text(code)
    proc, _ = score(["TimesThree"], "--plugin", module, run=plugins)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == (
        "pycaffe-lite test: error: cannot import plugin module '%s' (named by --plugin %s): "
        "%s (at %s, line %d: the module was found, its code failed)"
        % (module, module, error, plugins.folder / (module + ".py"), line))


@pytest.mark.parametrize("how", ["flag", "variable", "entry point"])
def test_no_python_layers_refuses_plugins_before_importing_them(plugins, how):
    env, extra = {}, []
    if how == "flag":
        extra = ["--plugin", "timesthree"]
    elif how == "variable":
        env = {"PYCAFFE_LITE_PLUGINS": "timesthree"}
    else:
        _install_entry_point(plugins.folder, "timesthree")
    proc, values = score(["TimesThree"], "--no_python_layers", *extra, run=plugins, env=env)
    assert proc.returncode == 1 and values == []
    assert not (plugins.folder / "timesthree.imported").exists()  # never imported
    last = proc.stderr.splitlines()[-1]
    if how == "entry point":  # installed plugins are left alone: the type stays unknown
        assert "unknown layer type 'TimesThree'" in last
        assert "plugin entry points not loaded: layers = timesthree" in proc.stderr
    else:
        assert "plugin module 'timesthree'" in last and "turned off" in last, last


def test_a_net_from_python_says_the_plugins_variable_was_refused(plugins, tmp_path):
    """caffe.Net with PYCAFFE_LITE_PLUGINS set and Python layers turned off: the module is not
    imported, and the unknown type's error says why, instead of asking for the variable that
    is already set."""
    plugins(["TimesThree"], "--version")  # writes the net
    code = ("import pycaffe_lite as caffe\ncaffe.Net(%r, caffe.TEST)\n"
            % str(tmp_path / "net.prototxt"))
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, str(plugins.folder)]),
                   PYCAFFE_LITE_PLUGINS="timesthree", PYCAFFE_LITE_ALLOW_PYTHON_LAYERS="0")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=environ, timeout=300)
    assert proc.returncode == 1
    assert not (plugins.folder / "timesthree.imported").exists()  # never imported
    last = proc.stderr.splitlines()[-1]
    assert "unknown layer type 'TimesThree' (layer 'l0')" in last
    assert last.endswith("PYCAFFE_LITE_PLUGINS=timesthree names plugin modules, but they were "
                         "not imported: plugins are turned off with Python layers "
                         "(PYCAFFE_LITE_ALLOW_PYTHON_LAYERS=0); allow them only for modules "
                         "you trust"), last
