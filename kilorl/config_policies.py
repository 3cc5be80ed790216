"""Each policy's view of a run with several policies (``multi_agent.policies``).

A policy's view is the run's config with the policy's own ``algo`` and ``model`` sections in
place of the run's (where it gives them), so the parts that build one policy (the model
builder, the behaviour policy, the algorithm's learner) are built from a ``Config`` as in a
single-policy run and never learn that other policies exist. The view is validated like a
run, so a policy's section that the run could not train is an error naming the policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ValidationError

from kilorl.config_section import Section

RunConfig = TypeVar("RunConfig", bound=Section)
"""The run's ``Config`` (``kilorl.config`` imports this module, so it is not named here)."""


def policy_configs(cfg: RunConfig, describe: Callable[[ValidationError], str]) -> dict[str, RunConfig]:
    """``{policy: view}`` in ``multi_agent.policies`` order; ``{}`` without a ``multi_agent`` section
    (``Config.policy_configs()`` calls this).

    Raises ValueError naming ``multi_agent.policies.<name>.<field>`` when a policy's sections
    do not validate as a run's (``describe``: the config's own wording of a validation error)."""

    section: Any = cfg.multi_agent  # type: ignore[attr-defined]
    if section is None:
        return {}
    run = cfg.model_dump()
    views: dict[str, RunConfig] = {}
    for name, policy in section.policies.items():
        data: dict[str, Any] = {**run, "multi_agent": {**run["multi_agent"], "policies": {name: {}},
                                                       "policy_mapping": {"*": name}, "policies_to_train": None,
                                                       "hierarchy": None},
                            "evaluation": {}}  # the run evaluates every policy together; a view, none
        if policy.algo is not None:
            data["algo"] = policy.algo
        if policy.model is not None:
            data["model"] = policy.model
        try:
            views[name] = type(cfg).model_validate(data)
        except ValidationError as err:
            lines = describe(err).removeprefix("invalid config:\n  ").split("\n  ")
            raise ValueError("; ".join(f"multi_agent.policies.{name}.{line}" for line in lines)) from None
    return views


def check_policies(cfg: Any, describe: Callable[[ValidationError], str]) -> None:
    """Several policies: each one's view validates as a run, and together they stay within what
    several policies support so far (``MultiAgentConfig.check_several``); errors name the field."""
    from kilorl.algos.registry import get as algo_spec

    section = cfg.multi_agent
    placed = sorted(cfg.resources.policies)
    if placed and (section is None or not section.several):
        raise ValueError(f"resources.policies: {placed} given, but the run has no several multi_agent.policies "
                         "(a run of one policy places its learners with resources.learner)")
    if section is None or not section.several:
        return
    unknown = [p for p in placed if p not in section.policies]
    if unknown:
        raise ValueError(f"resources.policies: {unknown} are not in multi_agent.policies "
                         f"({', '.join(section.policies)})")
    if cfg.sync.durable:
        raise ValueError(f"sync.durable: not supported with several policies (multi_agent.policies: "
                         f"{', '.join(section.policies)}) so far: a resume takes each policy from its checkpoint part")
    if cfg.monitor.prometheus.enabled and cfg.monitor.migration.enabled:
        raise ValueError(f"monitor.migration.enabled: moving a policy's learner process (multi_agent.policies: "
                         f"{', '.join(section.policies)}) is not built; set it to false to monitor without moves")
    normalize = [f for f in ("normalize_obs", "normalize_reward") if getattr(cfg.env, f)]
    for view in policy_configs(cfg, describe).values():
        section.check_several(algo_spec(view.algo.name).data_path, normalize,
                              cfg.store.transport, view.model.recurrent is not None)


def learner_roles(cfg: Any) -> dict[str, str]:
    """Scheduler role -> policy of each policy's learner process (``learner/<policy>``); ``{}``
    for a run of one policy, whose learners are the ``learner`` role."""
    section = cfg.multi_agent
    if section is None or not section.several:
        return {}
    return {f"learner/{name}": name for name in section.policies}


def learner_resources(cfg: Any, policy: str) -> Any:
    """``resources.policies.<policy>``, or ``resources.learner`` where the policy is not named."""
    return cfg.resources.policies.get(policy, cfg.resources.learner)
