"""The Atari entry point: the usual DQN preprocessing over a real ALE game."""

from __future__ import annotations

import numpy as np

from kilorl.envs.atari import make_atari


def test_pong_gives_uint8_84x84_stacks_of_four_and_rewards_clipped_to_their_sign():
    env = make_atari("Pong", frame_stack=4)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    rng = np.random.default_rng(0)
    rewards = set()
    for _ in range(400):  # Pong scores within a few hundred agent steps of random play
        obs, reward, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        rewards.add(float(reward))
        assert not (terminated or truncated)
    assert rewards <= {-1.0, 0.0, 1.0} and -1.0 in rewards
    assert np.any(obs[0] != obs[3])  # the stack holds four different frames
    env.close()


def test_a_lost_life_ends_the_learners_episode_but_not_the_game():
    """Breakout has 5 lives: losing one is ``terminated``, and the reset after it carries the
    game on (lives left, no new game) until the last one is gone."""
    env = make_atari("Breakout", frame_stack=1)
    env.reset(seed=0)
    ale = env.unwrapped.ale
    assert ale.lives() == 5
    lost = 0
    for _ in range(3000):
        _, _, terminated, truncated, _ = env.step(0)  # never move: the ball is lost every time
        if terminated or truncated:
            lost += 1
            env.reset()
            if ale.lives() == 0 or lost == 2:
                break
    assert lost == 2 and ale.lives() == 3  # two lives gone, the same game going on
    env.close()
