"""Returns-to-go of one recorded episode, against sums worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from kilorl.datasets import returns_to_go


def test_each_step_gets_its_discounted_reward_and_those_after_it():
    # gamma 0.5 over rewards 1, 2, 3: 1 + 0.5*2 + 0.25*3 = 2.75, 2 + 0.5*3 = 3.5, 3
    np.testing.assert_allclose(returns_to_go(np.array([1.0, 2.0, 3.0]), 0.5), [2.75, 3.5, 3.0])
    np.testing.assert_allclose(returns_to_go(np.array([1.0, -1.0, 4.0]), 1.0), [4.0, 3.0, 4.0])
    np.testing.assert_allclose(returns_to_go(np.array([5.0, 7.0]), 0.0), [5.0, 7.0])
    assert returns_to_go(np.zeros(0), 0.9).shape == (0,)


def test_a_gamma_outside_zero_to_one_is_refused_naming_it():
    with pytest.raises(ValueError, match="gamma"):
        returns_to_go(np.ones(3), 1.5)
