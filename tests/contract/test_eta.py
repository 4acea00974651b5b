"""The ETA every view shows (monitor/eta.py): the predicted step time, corrected by the measured one."""

from paradvisor.monitor.eta import PRIOR_STEPS, eta, step_time_estimate


def test_prediction_alone_before_any_step():
    assert eta(0, 10, predicted_s=2.0, measured_s=None, measured_steps=0) == (0.0, 20.0)


def test_measurement_takes_over_as_steps_come_in():
    first = step_time_estimate(2.0, 1.0, 1)
    later = step_time_estimate(2.0, 1.0, 100)
    assert 1.0 < later < first < 2.0
    assert first == (1.0 * 1 + 2.0 * PRIOR_STEPS) / (1 + PRIOR_STEPS)
    assert step_time_estimate(None, 1.5, 3) == 1.5


def test_no_eta_without_a_total_or_when_done():
    assert eta(5, None, predicted_s=1.0, measured_s=1.0, measured_steps=5) == (None, None)
    assert eta(10, 10, predicted_s=1.0, measured_s=1.0, measured_steps=10) == (1.0, None)
    assert eta(4, 10, predicted_s=None, measured_s=None, measured_steps=0) == (0.4, None)
    assert eta(4, 10, predicted_s=1.0, measured_s=1.0, measured_steps=4, running=False) == (0.4, None)
