"""A user's own training script, data-parallel through ``pycaffe_lite.parallel`` (run by
tests/test_parallel_mpi.py under mpiexec): ``python parallel_train_script.py solver.prototxt``."""

import sys

import pycaffe_lite as caffe
from pycaffe_lite import parallel


def main(solver_path):
    comm = parallel.init()
    caffe.set_mode_cpu()
    solver = caffe.get_solver(solver_path)
    parallel.DataParallel(solver, comm).attach()
    solver.solve()
    # every rank ends with rank 0's weights
    import numpy as np
    mine = np.concatenate([b.data.ravel() for b in solver.net.learnable_params])
    root = comm.comm.bcast(mine if comm.rank == 0 else None, root=0)
    if not np.array_equal(mine, root):
        print("rank %d: weights differ from rank 0's" % comm.rank, flush=True)
        comm.abort(3)
    print("rank %d of %d done at iteration %d" % (caffe.solver_rank(), caffe.solver_count(),
                                                   solver.iter), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
