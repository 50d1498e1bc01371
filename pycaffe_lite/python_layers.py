"""Whether a net may contain ``type: "Python"`` layers, which import the module they name.

A ``Python`` layer runs whatever code its ``python_param.module`` holds, as in Caffe: a net file
from someone else can therefore run code on this machine. Caffe's behaviour stays the default;
turn it off for untrusted files with ``Net(..., allow_python_layers=False)``, the environment
variable ``PYCAFFE_LITE_ALLOW_PYTHON_LAYERS=0`` or the commands' ``--no_python_layers``. A
refused net fails before any layer is created, so nothing is imported.
"""

import os

from .errors import NetError
from .switches import switch

ENV = "PYCAFFE_LITE_ALLOW_PYTHON_LAYERS"


def allowed(override=None):
    """``override`` when it is not None, else what ``PYCAFFE_LITE_ALLOW_PYTHON_LAYERS`` says
    (allowed unless it is 0, false, no or off)."""
    if override is not None:
        return bool(override)
    return switch(ENV)


# The command-line flag that turned Python layers off in this process, where one did (the
# command line sets the variable for it, which also reaches the ranks mpiexec starts).
_flag = []


def turn_off_for_command(flag="--no_python_layers"):
    """Turn Python layers off for a command given ``flag``; its refusals name the flag."""
    os.environ[ENV] = "0"
    _flag[:] = [flag]


def forget_command():
    """The command is over: its flag no longer explains the variable."""
    _flag[:] = []


def turned_off_by():
    """What turned Python layers off, as a refusal names it: the command's flag, else the
    variable and its value."""
    value = os.environ.get(ENV, "")
    if _flag and value == "0":
        return _flag[0]
    return "%s=%s" % (ENV, value)


def python_layers(net_param):
    """``[(layer name, module, class)]`` of the ``Python`` layers in a NetParameter, in every
    phase (V1 layers have no Python type)."""
    return [(lp.name, lp.python_param.module, lp.python_param.layer)
            for lp in net_param.layer if lp.type == "Python"]


def refuse(net_param, allow=None, where=None):
    """Raise a NetError naming the first ``Python`` layer (and its module) when Python layers
    are not allowed; do nothing otherwise."""
    if allowed(allow):
        return
    layers = python_layers(net_param)
    if not layers:
        return
    name, module, cls = layers[0]
    how = "allow_python_layers=False" if allow is not None else turned_off_by()
    raise NetError("%snet '%s': layer '%s' is a Python layer (python_param.module '%s', layer "
                   "'%s'), which would import and run that module's code, and Python layers "
                   "are turned off (%s); only allow them for net files you trust"
                   % ("%s: " % where if where else "", net_param.name, name, module, cls, how))
