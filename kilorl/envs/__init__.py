"""Environment construction: Gymnasium ids or ``package.module:ClassName`` entry points."""

from kilorl.envs.factory import check_env_id, env_spaces, is_parallel_env, make_env, make_parallel_env, make_vector_env

__all__ = ["check_env_id", "env_spaces", "is_parallel_env", "make_env", "make_parallel_env", "make_vector_env"]
