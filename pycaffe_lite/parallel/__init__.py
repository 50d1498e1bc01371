"""Data-parallel training: several processes (CPUs, GPUs, machines) train one model together.

Caffe's semantics: every process (a *rank*) runs the same solver with its own ``batch_size``
(the effective batch is N x batch_size); in TRAIN the data layers give record i to rank i mod N;
rank 0's weights are broadcast at the start; the gradients are averaged over the ranks before
the solver's normalise / regularise / clip / update; rank 0 tests, displays and snapshots.

In a script of one's own, under ``mpiexec -n N python script.py``::

    import pycaffe_lite as caffe
    from pycaffe_lite import parallel

    comm = parallel.init()               # MPI; sets caffe.solver_count() and solver_rank()
    solver = caffe.get_solver("solver.prototxt")
    parallel.DataParallel(solver, comm).attach()   # broadcast + average the gradients
    solver.solve()

GPUs use NCCL (``caffe.NCCL``, or :func:`init` with ``nccl=True``). ``comm.set_timeout(seconds)``
on every rank after :func:`init` (and ``comm.close()`` at the end) ends the job when a rank
waits longer than that in one collective, MPI's or NCCL's.
"""

from .. import ranks
from ..ranks import (multiprocess, root_solver, set_multiprocess, set_solver_count,
                     set_solver_rank, solver_count, solver_rank)
from .comm import LocalComm, MPIComm, NCCLComm, import_mpi
from .reducer import DEFAULT_BUCKET_BYTES, NCCL, DataParallel

__all__ = ["init", "DataParallel", "NCCL", "MPIComm", "NCCLComm", "LocalComm", "import_mpi",
           "solver_count", "solver_rank", "set_solver_count", "set_solver_rank",
           "set_multiprocess", "multiprocess", "root_solver", "DEFAULT_BUCKET_BYTES",
           "derive_rank_random_state"]


def init(comm=None, nccl=False):
    """Join the MPI job this process was started in (mpi4py's ``COMM_WORLD`` unless ``comm``
    is given: an mpi4py communicator, or an :class:`MPIComm` whose collective timeout is kept)
    and set ``solver_count()``/``solver_rank()`` from it. With ``nccl=True`` (GPU mode) the
    gradients go through NCCL, its id handed out over MPI (the MPI communicator's collective
    timeout watches NCCL's waits too). Returns the communicator for :class:`DataParallel`."""
    mpi = comm if isinstance(comm, MPIComm) else MPIComm(comm)
    ranks.reset()
    ranks.set_solver_count(mpi.size)
    ranks.set_solver_rank(mpi.rank)
    ranks.set_multiprocess(mpi.size > 1)
    if not nccl or mpi.size == 1:
        return mpi
    uid = mpi.bcast_object(NCCLComm.new_uid() if mpi.rank == 0 else None, 0)
    return NCCLComm(uid, mpi.rank, mpi.size, mpi=mpi)


def derive_rank_random_state(solver):
    """After every rank restored the same snapshot (which holds rank 0's random state), give
    ranks other than 0 random streams of their own, derived from rank 0's and the rank, so
    that dropout masks and random crops stay independent between ranks, as in the run that
    wrote the snapshot (the device's random stream too, in GPU mode). Data positions (global)
    are kept."""
    import numpy as np

    from .. import backend
    rank = ranks.solver_rank()
    if rank == 0:
        return

    def derived(state):
        gen = np.random.default_rng()
        gen.bit_generator.state = state
        seed = np.random.SeedSequence([int(gen.integers(0, 2 ** 63)), rank])
        return np.random.default_rng(seed).bit_generator.state

    backend.set_rng_state(derived(backend.get_rng_state()))
    device = backend.get_device_rng_state()  # GPU mode: the stream dropout draws from
    if device is not None:
        key = np.random.SeedSequence([device[0], rank]).generate_state(1, np.uint64)[0]
        backend.set_device_rng_state([int(key), device[1]])
    for net in [solver.net] + list(solver.test_nets):
        for layer in net.layers:
            get_state = getattr(layer, "get_state", None)
            if not callable(get_state) or not callable(getattr(layer, "set_state", None)):
                continue
            state = get_state()
            if isinstance(state, dict) and isinstance(state.get("rng"), dict):
                state = dict(state)
                state["rng"] = derived(state["rng"])
                layer.set_state(state)
