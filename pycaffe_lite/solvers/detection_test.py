"""The detection test phase of the SSD fork (``eval_type: "detection"``).

Each test net output is expected to be a DetectionEvaluate top: its rows are gathered over
the ``test_iter`` batches and each output is reported as the mean average precision over
the classes (``ap_version``: "11point", "MaxIntegral" or "Integral"), as the fork's
``Solver::TestDetection`` does; ``show_per_class_result`` logs each class's AP too.
"""

import logging

from ..errors import CaffeError
from ..layers.detection.average_precision import AP_VERSIONS, DetectionAccumulator

log = logging.getLogger("pycaffe_lite")


def check_eval_type(param):
    """Refuse an unknown ``eval_type`` or ``ap_version`` before training starts."""
    if param.eval_type not in ("classification", "detection"):
        raise CaffeError("solver eval_type %r is unknown; expected \"classification\" or "
                         "\"detection\"" % param.eval_type)
    if param.eval_type == "detection" and param.ap_version not in AP_VERSIONS:
        raise CaffeError("solver ap_version %r is unknown; expected one of %s"
                         % (param.ap_version, ", ".join(AP_VERSIONS)))


def test_detection(solver, test_net_id=0):
    """Run test net ``test_net_id`` for its test_iter batches and log each output's mAP.

    Returns the list of ``(output name, mAP)`` (also kept in ``solver.test_scores``), or
    None when the test was interrupted."""
    param = solver.param
    check_eval_type(param)
    log.info("Iteration %d, Testing net (#%d)", solver.iter, test_net_id)
    net = solver.test_nets[test_net_id]
    net.share_with(solver.net)
    names = list(net.outputs)
    accumulators = [DetectionAccumulator() for _ in names]
    loss = 0.0
    n_iter = param.test_iter[test_net_id]
    if n_iter <= 0:  # no test batch, no output line (as a classification test)
        solver.test_scores[test_net_id] = []
        return []
    for _ in range(n_iter):
        if solver._requests_stop_testing():
            log.info("Test interrupted.")
            return None
        iter_loss = net.forward_from_to()
        if param.test_compute_loss:
            loss += iter_loss
        for name, acc in zip(names, accumulators):
            rows = net.blobs[name].data
            if rows.shape[-1] != 5:
                raise CaffeError("eval_type \"detection\": test net output '%s' has shape %s; "
                                 "expected DetectionEvaluate's rows of 5 values"
                                 % (name, rows.shape))
            acc.add(rows.reshape(-1, 5))
    if param.test_compute_loss:
        log.info("Test loss: %.6g", loss / n_iter)
    results = []
    for index, (name, acc) in enumerate(zip(names, accumulators)):
        if param.show_per_class_result:
            for label, ap in acc.average_precisions(param.ap_version).items():
                log.info("class%d: %.6g", label, ap)
        m_ap = acc.mean_average_precision(param.ap_version)
        log.info("    Test net output #%d: %s = %.6g", index, name, m_ap)
        results.append((name, m_ap))
    solver.test_scores[test_net_id] = results
    return results
