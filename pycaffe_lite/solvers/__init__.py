"""Solvers: Caffe's update rules, learning-rate policies, the training loop and snapshots.

pycaffe's surface::

    solver = get_solver("models/lenet/lenet_solver.prototxt")   # the file's type
    solver = SGDSolver("solver.prototxt")                       # or a given rule
    solver.net, solver.test_nets, solver.iter
    solver.step(100); solver.solve(); solver.snapshot(); solver.restore("x.solverstate")
    solver.add_callback(on_start, on_gradients_ready); solver.apply_update()

The rules (``type``): SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam; the legacy
``solver_type`` enum is upgraded on read.
"""

import os

from ..proto import protoio
from ..registry import SOLVERS
from . import lr_policy  # noqa: F401  (registers the policies)
from .adadelta import AdaDeltaSolver
from .adagrad import AdaGradSolver
from .adam import AdamSolver
from .nesterov import NesterovSolver
from .rmsprop import RMSPropSolver
from .sgd import SGDSolver
from .solver import Solver, build_net


def solver_class(type_name, context=""):
    """The Solver subclass registered for ``type_name`` ("SGD", "Adam", ...)."""
    return SOLVERS.get(type_name, context)


def get_solver(source, base_dir=None):
    """A solver of the type its parameters name (pycaffe's ``caffe.get_solver``).

    ``source``: a solver prototxt path, prototxt text or a SolverParameter. Relative paths in
    it resolve against the working directory first, then ``base_dir`` (default: the solver
    file's folder) and the folders above it.
    """
    is_file = isinstance(source, (str, os.PathLike)) and os.path.isfile(source)
    param = protoio.read_solver_param(source)
    cls = solver_class(param.type, "type in %s" % (os.fspath(source) if is_file
                                                  else "solver parameters"))
    return cls(param, base_dir, source_path=source if is_file else None)


__all__ = ["Solver", "SGDSolver", "NesterovSolver", "AdaGradSolver", "RMSPropSolver",
           "AdaDeltaSolver", "AdamSolver", "get_solver", "solver_class", "build_net"]
