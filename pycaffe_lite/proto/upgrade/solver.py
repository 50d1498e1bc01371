"""Solvers: the deprecated ``solver_type`` enum becomes the ``type`` string."""

from ...errors import ProtoError
from .. import caffe_pb2
from ._common import log

_SOLVER = caffe_pb2.SolverParameter

_SOLVER_TYPE_NAMES = {
    _SOLVER.SGD: "SGD",
    _SOLVER.NESTEROV: "Nesterov",
    _SOLVER.ADAGRAD: "AdaGrad",
    _SOLVER.RMSPROP: "RMSProp",
    _SOLVER.ADADELTA: "AdaDelta",
    _SOLVER.ADAM: "Adam",
}


def solver_needs_upgrade(solver_param):
    """Whether the solver names its update rule with the deprecated ``solver_type`` enum."""
    return solver_param.HasField("solver_type")


def upgrade_solver_as_needed(solver_param, source="<string>"):
    """Upgrade ``solver_param`` in place; True if anything changed.

    ``solver_type`` becomes the ``type`` string. If ``type`` is set as well it must name the
    same rule, otherwise a :class:`ProtoError` is raised.
    """
    if not solver_needs_upgrade(solver_param):
        return False
    log.info("Attempting to upgrade input file specified using deprecated "
             "'solver_type' field (enum): %s", source)
    enum_value = solver_param.solver_type
    type_name = _SOLVER_TYPE_NAMES.get(enum_value)
    if type_name is None:
        raise ProtoError(f"unknown solver_type {enum_value}", path=source)
    if solver_param.HasField("type") and solver_param.type != type_name:
        raise ProtoError(
            f"solver_type: {_SOLVER.SolverType.Name(enum_value)} (deprecated) and type: "
            f"\"{solver_param.type}\" disagree; keep only type", path=source)
    solver_param.type = type_name
    solver_param.ClearField("solver_type")
    log.info("Successfully upgraded file specified using deprecated 'solver_type' field "
             "(enum) to 'type' field (string).")
    return True
