"""A user's own script whose NCCL collectives never complete (CuPy's NCCL replaced by the fakes
of fake_nccl.py: a peer that never joins), run by tests/test_collective_timeout.py under
mpiexec: ``python nccl_timeout_script.py TIMEOUT WAY``. WAY ``nccl``: the timeout set on the
NCCL communicator that ``parallel.init(nccl=True)`` gives; ``mpi``: set on an MPIComm that
``parallel.init`` is then given, as ``pycaffe-lite train --collective_timeout`` does. Rank 1
stops itself (SIGSTOP) before the allreduce, as a frozen machine does; rank 0 waits in its
allreduce until the timeout ends the job. WAY ``init``: as ``mpi``, but rank 1 freezes in
NCCL's set-up (``ncclCommInitRank``), where rank 0 waits."""

import logging
import os
import signal
import socket
import sys

import numpy as np

import fake_nccl
from pycaffe_lite import parallel


def main(timeout, way):
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    fake_nccl.STATE["hang"] = True
    fake_nccl.install()
    if way == "init":  # rank 1 freezes in NCCL's set-up, rank 0 waits there
        fake_nccl.STATE["hang_init"] = True
        mpi = parallel.MPIComm()
        mpi.set_timeout(timeout)
        print("rank %d: pid %d on %s, NCCL" % (mpi.rank, os.getpid(), socket.gethostname()),
              flush=True)
        mpi.barrier()
        parallel.init(mpi, nccl=True)
        print("rank %d: NCCL's set-up returned" % mpi.rank, flush=True)
        return
    if way == "nccl":
        comm = parallel.init(nccl=True)
        comm.set_timeout(timeout)
    else:
        mpi = parallel.MPIComm()
        mpi.set_timeout(timeout)
        comm = parallel.init(mpi, nccl=True)
    print("rank %d: pid %d on %s, %s" % (comm.rank, os.getpid(), socket.gethostname(),
                                         comm.name), flush=True)
    comm.note("iteration 5")
    comm.barrier()  # through MPI: every rank has set its timeout
    if comm.rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    comm.allreduce(fake_nccl.FakeDeviceArray(np.zeros(1024, np.float32)))
    print("rank %d: the allreduce returned" % comm.rank, flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]), sys.argv[2])
