"""Which solver of a data-parallel job this process runs: Caffe's ``solver_count`` and
``solver_rank`` (``Caffe::solver_count()``, ``Caffe::solver_rank()``, ``root_solver()``, kept in
Caffe's common.hpp beside the mode).

Core state with no dependency on MPI or NCCL: the solver (which tests and snapshots on the root
only) and the data layers (which give TRAIN record i to rank i mod N) read it; ``parallel``
(MPI, NCCL, the launchers) sets it.
"""

from .errors import CaffeError

_state = {"count": 1, "rank": 0, "multiprocess": False}


def solver_count():
    """How many solvers (processes) train together; 1 outside a data-parallel job."""
    return _state["count"]


def solver_rank():
    """This process's solver rank, 0 .. solver_count() - 1."""
    return _state["rank"]


def root_solver():
    """True on rank 0: the solver that tests, displays and writes snapshots."""
    return _state["rank"] == 0


def multiprocess():
    return _state["multiprocess"]


def set_solver_count(count):
    count = int(count)
    if count < 1:
        raise CaffeError("set_solver_count(%d): the count must be at least 1" % count)
    if _state["rank"] >= count:
        raise CaffeError("set_solver_count(%d): the solver rank is %d, which needs at least %d "
                         "solvers" % (count, _state["rank"], _state["rank"] + 1))
    _state["count"] = count


def set_solver_rank(rank):
    rank = int(rank)
    if not 0 <= rank < _state["count"]:
        raise CaffeError("set_solver_rank(%d): the rank must be in 0 .. %d (solver_count() is "
                         "%d; call set_solver_count first)"
                         % (rank, _state["count"] - 1, _state["count"]))
    _state["rank"] = rank


def set_multiprocess(value):
    """pycaffe's flag for one solver per process (always the case here; kept for scripts)."""
    _state["multiprocess"] = bool(value)


def reset():
    """Back to a single solver."""
    _state.update(count=1, rank=0, multiprocess=False)


def data_ranks(phase):
    """(solver count, rank) by which a data layer of ``phase`` shares its records: the job's
    in TRAIN, (1, 0) in TEST (the root solver tests over the whole test set)."""
    if phase != 0:  # caffe_pb2.TRAIN is 0
        return 1, 0
    return _state["count"], _state["rank"]
