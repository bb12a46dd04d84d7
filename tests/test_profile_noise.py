"""A cost profile timed on a busy machine: the busy rule's cells, and the table smoothed from a
quiet row's shape or from the quiet cells beside the noisy ones. Timings are given."""

from __future__ import annotations

import pytest

from specviz.engines.cost.profile_noise import cheapest, noisy_cells, smoothed, uneven

# smollm2-135m on llama.cpp, 2 threads, timed while test workers had both cores (2026-11-27),
# and the 0.5B's quiet row with its dips (tests/test_profile.py).
BUSY_ROW = [23.064, 313.453, 348.882, 149.75, 184.904, 521.641, 419.666, 221.956, 164.911]
QUIET_ROW = [15.63, 20.1, 23.4, 27.0, 30.2, 33.1, 32.5, 27.6, 29.9]
BATCHES = [1, 2, 3, 4, 5, 6, 7, 8, 9]


def test_the_noisy_cells_are_those_far_dearer_than_a_larger_batch():
    assert noisy_cells(BUSY_ROW) == {1, 2, 5, 6}  # batches 2, 3, 6 and 7
    assert noisy_cells(QUIET_ROW) == set()  # dips within 1.2x are a quiet machine's


def test_a_row_alone_is_rebuilt_from_the_quiet_cells_beside_its_noisy_ones():
    row = smoothed([128], BATCHES, [BUSY_ROW])[0]
    assert uneven([128], BATCHES, [row]) == ""
    assert row == sorted(row)  # a busy row cannot tell a dip from noise: monotone
    assert row[0] == BUSY_ROW[0] and row[3] == BUSY_ROW[3]  # quiet cells as measured
    third = (BUSY_ROW[3] - BUSY_ROW[0]) / 3  # batch 2 on the line from batch 1 to batch 4
    assert row[1] == pytest.approx(BUSY_ROW[0] + third, abs=1e-3)
    assert row[2] == pytest.approx(BUSY_ROW[0] + 2 * third, abs=1e-3)
    assert row[4:] == [BUSY_ROW[-1]] * 5  # no batch dearer than the 9 that was measured
    assert all(new <= old for new, old in zip(row, BUSY_ROW))  # noise only added time


def test_a_noisy_row_takes_the_shape_of_a_row_measured_quietly():
    """A row at another context measured quietly gives the shape; the noisy row's own quiet
    cells give its scale. The quiet row is kept as measured, dips and all."""
    scaled = [1.3 * ms for ms in QUIET_ROW]
    noisy = list(scaled)
    noisy[1], noisy[2] = 300.0, 280.0
    quiet_out, noisy_out = smoothed([128, 512], BATCHES, [QUIET_ROW, noisy])
    assert quiet_out == QUIET_ROW
    assert noisy_out[1:3] == pytest.approx(scaled[1:3], abs=1e-3)
    assert noisy_out == sorted(noisy_out)
    assert noisy_out[4:8] == pytest.approx([scaled[7]] * 4, abs=1e-3)  # capped at batch 8's
    assert uneven([128, 512], BATCHES, [quiet_out, noisy_out]) == ""


def test_of_two_measurements_each_cell_keeps_its_cheaper_time():
    assert cheapest([[1.0, 5.0], [3.0, 2.0]], [[2.0, 4.0], [1.0, 9.0]]) == [[1.0, 4.0],
                                                                            [1.0, 2.0]]
