"""What the docs tell a newcomer, checked against what the code does: the lists of commands
that take a flag, the numbers and defaults the prose states, the commands as written."""

import argparse
import os
import re

from pycaffe_lite import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def _commands_with_flag(flag):
    """The CLI's commands whose parser takes ``flag``."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name for name, p in sub.choices.items()
            if any(flag in a.option_strings for a in p._actions)}


def _listed_commands(text, start):
    """The backticked command names of the sentence (up to its full stop) that begins with
    ``start``."""
    i = text.index(start) + len(start)
    sentence = re.split(r"\.(\s|$)", text[i:], maxsplit=1)[0]
    commands = _commands_with_flag("--help")
    return {name for name in re.findall(r"`([a-z_0-9]+)`", sentence) if name in commands}


def test_the_commands_said_to_take_no_python_layers_are_those_that_do():
    text = _read("docs", "training-tools.md")
    listed = _listed_commands(text, "`--no_python_layers` is accepted by the commands that "
                                    "build nets:")
    assert listed == _commands_with_flag("--no_python_layers")


def test_the_commands_said_to_load_plugins_are_those_that_do():
    taking = _commands_with_flag("--plugin")
    text = _read("docs", "custom-layers.md")
    assert _listed_commands(text, "name it in one of three ways; every command that builds "
                                  "a net") == taking
    text = _read("docs", "command-line.md")
    assert _listed_commands(text, "The commands that build nets") == taking


def test_the_lenet_readme_shows_each_command_it_announces():
    """"Resume, fine-tune, score and time:" is followed by one command for each, and each
    parses with the command line's own flags."""
    text = _read("models", "lenet", "README.md")
    start = text.index("Resume, fine-tune, score and time:")
    block = re.search(r"```bash\n(.*?)```", text[start:], re.S).group(1)
    parser = cli.build_parser()
    seen = set()
    for line in block.replace("\\\n", " ").splitlines():
        argv = line.split()
        assert argv[0] == "pycaffe-lite"
        args = cli.parse(parser, cli.normalise_flags(argv[1:]))
        if args.command == "train":
            assert bool(args.snapshot) != bool(args.weights)
            seen.add("resume" if args.snapshot else "fine-tune")
        else:
            seen.add({"test": "score", "time": "time"}[args.command])
    assert seen == {"resume", "fine-tune", "score", "time"}


def test_the_tools_scripts_run_as_scripts():
    """command-line.md: tools/ has the tools as scripts; each one that starts with a '#!' line
    can be run as ./tools/NAME.py, as its siblings."""
    folder = os.path.join(ROOT, "tools")
    not_executable = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.endswith(".py"):
            with open(path, "rb") as f:
                if f.read(2) == b"#!" and not os.access(path, os.X_OK):
                    not_executable.append(name)
    assert not_executable == []


# performance.md's knobs: each variable, a value other than its default, and where the process
# keeps its setting (module, attribute; a one-item list, or a function of no argument)
KNOBS = {
    "PYCAFFE_LITE_CPU_KERNELS": ("0", "pycaffe_lite.ops.cpu", "_enabled"),
    "PYCAFFE_LITE_GEMM_SPLIT": ("0", "pycaffe_lite.ops.cpu", "_gemm_split"),
    "PYCAFFE_LITE_BLOCKED_ISA": ("avx2", "pycaffe_lite.ops.cpu.blocked", "_isa"),
    "PYCAFFE_LITE_CPU_THREADS": (None, "pycaffe_lite.ops.cpu", "threads"),
    "PYCAFFE_LITE_WINOGRAD": ("0", "pycaffe_lite.ops.cpu.convolution", "_winograd"),
    "PYCAFFE_LITE_POINTWISE": ("1", "pycaffe_lite.ops.pointwise", "_enabled"),
}

KNOBS_SCRIPT = r"""
import importlib, json, os, sys
import pycaffe_lite as caffe

knobs = json.loads(sys.argv[1])
for name, (value, _, _) in knobs.items():
    if value is not None:
        os.environ[name] = value
caffe.Net(sys.argv[2], caffe.TEST)
settings = {}
for name, (value, module, attr) in knobs.items():
    setting = getattr(importlib.import_module(module), attr)
    settings[name] = str(setting() if callable(setting) else setting[0]).lower()
print(json.dumps(settings))
"""


def test_the_knobs_are_read_when_performance_md_says(tmp_path):
    """performance.md: `import pycaffe_lite` alone reads none of the thread, kernel and
    convolution variables; they are read when their modules first load (with the first net).
    Each variable set after the import, before the first net, takes effect."""
    import json
    import subprocess
    import sys

    text = " ".join(_read("docs", "performance.md").split())
    assert "`import pycaffe_lite` alone loads none of them" in text
    net = tmp_path / "conv.prototxt"
    net.write_text('layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 '
                   'dim: 2 dim: 5 dim: 5 } } }\nlayer { name: "c" type: "Convolution" bottom: '
                   '"x" top: "c" convolution_param { num_output: 2 kernel_size: 3 } }\n')
    env = {k: v for k, v in os.environ.items()
           if k not in KNOBS and k != "OMP_NUM_THREADS"}
    env["PYTHONPATH"] = ROOT

    def settings(knobs):
        proc = subprocess.run(
            [sys.executable, "-c", KNOBS_SCRIPT,
             json.dumps({k: list(v) for k, v in knobs.items()}), str(net)],
            capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(proc.stdout.splitlines()[-1])

    unset = {k: (None,) + v[1:] for k, v in KNOBS.items()}
    default = settings(unset)
    knobs = dict(KNOBS)
    knobs["PYCAFFE_LITE_CPU_THREADS"] = (
        "1" if default["PYCAFFE_LITE_CPU_THREADS"] != "1" else "2",) + \
        KNOBS["PYCAFFE_LITE_CPU_THREADS"][1:]
    changed = settings(knobs)
    assert {name for name in KNOBS if changed[name] != default[name]} == set(KNOBS)


def test_the_install_commands_install_from_the_checkout():
    """The package installs from its source tree (getting-started.md: `pip install .`), not
    from an index: a `pip install 'pycaffe-lite[tensorboard]'` as written fetches nothing
    (pip finds no such distribution). Every pip command of the docs, and every install hint
    of the package's error messages, that installs the package or one of its extras names the
    checkout (`.`, `-e .`, `'.[extra]'`), and each extra it names is one of pyproject.toml's."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: tomli, which pytest itself needs there
        import tomli as tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    name, extras = project["name"], set(project["optional-dependencies"])
    files = ["README.md", "CONTRIBUTING.md"]
    files += ["docs/" + n for n in sorted(os.listdir(os.path.join(ROOT, "docs")))
              if n.endswith(".md")]
    for folder, _, names in os.walk(os.path.join(ROOT, "pycaffe_lite")):
        files += [os.path.relpath(os.path.join(folder, n), ROOT) for n in sorted(names)
                  if n.endswith(".py") and n != "caffe_pb2.py"]
    wrong, seen = [], 0
    for path in files:
        text = _read(*path.split("/"))
        for m in re.finditer(r"pip install ([^`\n&;#()]*)", text):
            seen += 1
            for word in m.group(1).split():
                word = word.strip("'\"")
                base, _, extra = word.partition("[")
                if base in (name, name.replace("-", "_")):
                    wrong.append("%s: pip install %s" % (path, word))
                elif base == "." and extra:
                    wrong += ["%s: no extra %r" % (path, e)
                              for e in extra.rstrip("]").split(",")
                              if e not in extras and "%" not in e]
    assert seen > 10 and wrong == []


def test_the_model_py_pytorch_md_shows_is_the_file_the_export_writes(tmp_path):
    """pytorch.md's worked example: "`lenet_torch/model.py`:" and then the file; the file
    export_pytorch writes for models/lenet/lenet.prototxt, line for line."""
    from pycaffe_lite.pytorch import export_files

    text = _read("docs", "pytorch.md")
    start = text.index("`lenet_torch/model.py`:")
    shown = re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)
    net, report = export_files(os.path.join(ROOT, "models", "lenet", "lenet.prototxt"), None,
                               str(tmp_path / "lenet_torch"))
    net.close()
    written = (tmp_path / "lenet_torch" / "model.py").read_text()
    assert shown.splitlines() == written.splitlines()


def _blocks(text):
    return [(m.group(1), m.group(2)) for m in
            re.finditer(r"^```(\w*)[^\n]*\n(.*?)^```", text, re.S | re.M)]


def test_custom_layers_md_trains_its_layer_from_the_command_line(tmp_path):
    """custom-layers.md as written: its layer into my_layers.py, its net and solver into the
    files it names, and both commands of "Layers of your own on the command line" run (the
    first used to name a module, more_layers, that the page never made, and the page gave no
    net or solver to train). The learned scale reaches 2, the target's factor."""
    import subprocess
    import sys

    import numpy as np

    import pycaffe_lite as caffe

    text = _read("docs", "custom-layers.md")
    section = text[text.index("## Layers of your own on the command line"):]
    blocks = _blocks(section)
    (tmp_path / "my_layers.py").write_text(_blocks(text)[0][1])
    texts = [body for kind, body in blocks if kind == "text"]
    (tmp_path / "scaled_tanh.prototxt").write_text(texts[0])
    (tmp_path / "solver.prototxt").write_text(texts[1])
    commands = [line for line in next(body for kind, body in blocks if kind == "bash")
                .splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, str(tmp_path)]))
    env.pop("PYCAFFE_LITE_PLUGINS", None)
    for command in commands:
        words = command.split()
        run_env = dict(env)
        while "=" in words[0]:
            name, _, value = words.pop(0).partition("=")
            run_env[name] = value
        assert words[0] == "pycaffe-lite"
        proc = subprocess.run([sys.executable, "-m", "pycaffe_lite.cli"] + words[1:],
                              cwd=str(tmp_path), env=run_env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, (command, proc.stderr[-2000:])
        weights = tmp_path / "scaled_tanh_iter_100.caffemodel"
        assert weights.exists()
        sys.path.insert(0, str(tmp_path))
        try:
            import my_layers  # noqa: F401  (registers ScaledTanH in this process)
        finally:
            sys.path.remove(str(tmp_path))
        net = caffe.Net(str(tmp_path / "scaled_tanh.prototxt"), str(weights), caffe.TEST)
        assert np.allclose(net.params["scale"][0].data, 2.0, rtol=1e-4)
        net.close()
        weights.unlink()
