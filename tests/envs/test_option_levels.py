"""Option levels: a high agent that picks an option on decision steps (every k moves, on the
env's option-end signal, at an episode's start), a low agent that moves seeing the running
option, and the sparse four-rooms task whose options they are."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

from kilorl.envs.option_levels import HIGH, LOW, OptionLevels, decision_flags, option_levels
from kilorl.envs.rooms import MOVES, SparseRooms


class Counter(gym.Env):
    """Counts moves; ``option_signal`` ends an option on the moves listed in ``ends``; reward
    1 on every move whose action is 1; the episode is truncated after ``length`` moves."""

    num_options = 2

    def __init__(self, ends: tuple[int, ...] = (), length: int = 50) -> None:
        self.observation_space = gym.spaces.Box(0, 1000, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.ends, self.length, self.moves = set(ends), length, 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        self.moves = 0
        return np.array([0.0], np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.moves += 1
        return np.array([self.moves], np.float32), float(action == 1), False, self.moves >= self.length, {}

    def option_signal(self, option: int) -> tuple[float, bool]:
        return 0.5 * option, self.moves in self.ends


def run(env: OptionLevels, steps: int, low_action: int = 1) -> list[dict[str, Any]]:
    """``steps`` steps, the high agent always picking option 1; each step's outputs."""
    obs, _ = env.reset(seed=0)
    out = []
    for _ in range(steps):
        decided = bool(decision_flags(obs[HIGH]))
        obs, rew, term, trunc, _ = env.step({HIGH: 1, LOW: low_action})
        out.append({"decided": decided, "obs": obs, "rew": rew, "done": term[HIGH] or trunc[HIGH]})
        if not env.agents:
            break
    return out


def test_option_levels_pass_pettingzoo_parallel_api_test():
    parallel_api_test(option_levels("kilorl.envs.rooms:SparseRooms", {"rooms": 2, "max_steps": 30}, 4),
                      num_cycles=200)


def test_the_high_level_decides_exactly_every_k_moves_and_a_decision_does_not_move_the_env():
    env = OptionLevels(Counter(), every_k=3)
    steps = run(env, 12)
    assert [s["decided"] for s in steps] == [True, False, False, False] * 3  # a decision, then k = 3 moves
    assert [float(s["obs"][LOW][0]) for s in steps[:5]] == [0.0, 1.0, 2.0, 3.0, 3.0]  # moves counted by the env


def test_the_high_level_decides_again_when_the_env_ends_the_option():
    env = OptionLevels(Counter(ends=(2, 4)), every_k=5)
    decided = [s["decided"] for s in run(env, 14)]
    # moves 1-2 (ended by the env at move 2), moves 3-4 (ended at 4), then 5 moves (k), then a decision
    assert decided == [True, False, False, True, False, False, True, False, False, False, False, False, True, False]


def test_until_done_options_last_until_the_env_ends_them():
    env = OptionLevels(Counter(ends=(6,)), every_k=None)
    decided = [s["decided"] for s in run(env, 9)]
    assert decided == [True] + [False] * 6 + [True, False]


def test_an_episode_end_ends_the_option_and_the_next_episode_starts_with_a_decision():
    env = OptionLevels(Counter(length=4), every_k=3)
    steps = run(env, 20)
    assert [s["decided"] for s in steps] == [True, False, False, False, True, False]  # truncated at move 4
    assert steps[-1]["done"] and not env.agents
    obs, _ = env.reset(seed=1)
    assert decision_flags(obs[HIGH]) and decision_flags(obs[LOW])


def test_the_low_level_sees_the_running_option_and_earns_the_env_reward_plus_the_option_bonus():
    env = OptionLevels(Counter(), every_k=3)
    steps = run(env, 4, low_action=1)
    decision, move = steps[0], steps[1]
    assert decision["rew"] == {HIGH: 0.0, LOW: 0.0}  # a decision step: nothing moved, nothing earned
    np.testing.assert_array_equal(move["obs"][LOW][1:], [0.0, 1.0, 0.0])  # option 1 one-hot, not a decision
    np.testing.assert_array_equal(move["obs"][HIGH][1:], [0.0, 0.0, 0.0])  # the high level sees no option
    assert move["rew"] == {HIGH: 1.0, LOW: 1.0 + 0.5}  # env reward 1; bonus 0.5 * option 1 (Counter's)


def test_bad_option_levels_are_errors_naming_the_field():
    with pytest.raises(ValueError, match=r"env.kwargs.env: CartPoleEnv offers no options"):
        option_levels("CartPole-v1")
    with pytest.raises(ValueError, match=r"env.kwargs.every_k must be at least 1"):
        OptionLevels(Counter(), every_k=0)
    with pytest.raises(ValueError, match=r"env.kwargs.rooms must be at least 1"):
        SparseRooms(rooms=0)


def test_rooms_reward_only_at_the_goal_and_options_end_at_walls():
    env = SparseRooms(rooms=2, room_size=5, max_steps=200)
    env.reset(seed=3)
    env.pos, env.goal = np.array([1, 2]), np.array([1, 4])
    _, reward, terminated, _, _ = env.step(1)  # east: (1, 3), in no doorway's or the goal's column
    assert (reward, terminated) == (0.0, False)
    assert env.option_signal(1) == (env.option_bonus, False)
    _, reward, terminated, _, _ = env.step(1)  # east: the goal
    assert (reward, terminated) == (1.0, True)
    env.pos, env.goal = np.array([1, 1]), np.array([4, 4])
    env.step(1)  # east to (1, 2): the column of the doorway (6, 2) in the room's south wall ends the option
    assert env.option_signal(1) == (env.option_bonus, True)
    env.pos = np.array([1, 1])
    env.step(0)  # north into the outer wall: no move, no bonus, and the option is over
    assert env.option_signal(0) == (0.0, True)
    assert (MOVES[0] == (-1, 0)).all()


def test_low_env_reward_weighs_the_env_reward_in_the_low_levels_reward():
    env = OptionLevels(Counter(), every_k=3, low_env_reward=0.0)
    move = run(env, 2, low_action=1)[1]
    assert move["rew"] == {HIGH: 1.0, LOW: 0.5}  # the option bonus only; the high level keeps the env's reward
