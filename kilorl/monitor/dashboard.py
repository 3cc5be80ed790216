"""The Grafana dashboard for kiloRL runs, generated from code (grafanalib).

``python -m kilorl.monitor.dashboard`` rewrites ``kilorl/monitor/dashboards/kilorl.json``,
the file shipped in the repository (a test checks the two agree). The panels are plain
data (:data:`PANELS`), so tests evaluate every query against a real Prometheus; Grafana's
``$__rate_interval`` and the ``$role`` / ``$node`` variables are the only placeholders.
grafanalib is needed only to regenerate the file (``pip install kilorl[monitor]``).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

DASHBOARD_PATH = Path(__file__).resolve().parent / "dashboards" / "kilorl.json"
UID = "kilorl-run"
DATASOURCE = "${DS_PROMETHEUS}"
SEL = 'role=~"$role", node=~"$node"'
"""Label matcher every query carries, so the dashboard's variables filter every panel."""
RATE = "$__rate_interval"


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    queries: tuple[tuple[str, str], ...]
    """(PromQL, legend) pairs."""
    gpu_only: bool = False
    """Returns no data on a machine without GPUs (its series are absent there, by design)."""
    description: str = ""


def _q(s: str) -> str:
    return s.replace("SEL", SEL).replace("RATE", RATE)


def _quantiles(metric: str) -> tuple[tuple[str, str], ...]:
    return tuple(
        (_q(f"histogram_quantile({q}, sum by (le, role) (rate({metric}_bucket{{SEL}}[RATE])))"), f"{{{{role}}}} p{int(q * 100)}")
        for q in (0.5, 0.99)
    )


PANELS: tuple[Panel, ...] = (
    Panel("Env steps/s per role", "ops", ((_q("sum by (role, rank, node) (rate(kilorl_env_steps_total{SEL}[RATE]))"),
                                           "{{role}}[{{rank}}] {{node}}"),)),
    Panel("Env steps/s reported by actors", "ops", ((_q("kilorl_env_steps_per_second{SEL}"), "{{role}}[{{rank}}]"),)),
    Panel("Episodes/s", "ops", ((_q("sum by (role) (rate(kilorl_episodes_total{SEL}[RATE]))"), "{{role}}"),)),
    Panel("Episode return", "none", ((_q("avg by (role, rank) (kilorl_episode_return{SEL})"), "{{role}}[{{rank}}]"),)),
    Panel("Policy lag", "none", ((_q("max by (role, rank) (kilorl_policy_lag_versions{SEL})"), "{{role}}[{{rank}}]"),),
          description="Parameter versions between the acting policy and the newest published one."),
    Panel("Learner update time", "s", _quantiles("kilorl_learner_update_seconds")),
    Panel("Parameter publish -> actor latency", "s", _quantiles("kilorl_param_publish_latency_seconds"),
          description="From a version being published to an actor holding it; spikes are sync stalls."),
    Panel("Comm bytes/s", "Bps", ((_q("sum by (role, direction) (rate(kilorl_comm_bytes_total{SEL}[RATE]))"),
                                   "{{role}} {{direction}}"),)),
    Panel("Store tier usage", "percentunit", ((_q("sum by (node, tier) (kilorl_store_tier_used_bytes{SEL}) / "
                                                   "sum by (node, tier) (kilorl_store_tier_capacity_bytes{SEL})"),
                                               "{{node}} {{tier}}"),)),
    Panel("Store hit rate", "percentunit", ((_q("sum by (tier) (rate(kilorl_store_hits_total{SEL}[RATE])) / "
                                                 "(sum by (tier) (rate(kilorl_store_hits_total{SEL}[RATE])) + "
                                                 "sum by (tier) (rate(kilorl_store_misses_total{SEL}[RATE])))"), "{{tier}}"),)),
    Panel("Host RSS per role", "bytes", ((_q("kilorl_process_resident_memory_bytes{SEL}"), "{{role}}[{{rank}}] {{node}}"),
                                         (_q('kilorl_memory_limit_bytes{memory="host", SEL}'), "limit {{role}}[{{rank}}]"))),
    Panel("Device memory per role", "bytes", tuple(
        (_q(f"kilorl_device_{m}_bytes{{SEL}}"), f"{label} {{{{role}}}}[{{{{rank}}}}] gpu{{{{device}}}}")
        for m, label in (("memory_allocated", "alloc"), ("memory_reserved", "reserved"), ("process_memory", "nvml"))),
          gpu_only=True),
    Panel("GPU utilisation", "percentunit", ((_q("max by (node, device) (kilorl_gpu_utilization_ratio{SEL})"),
                                              "{{node}} gpu{{device}}"),), gpu_only=True),
    Panel("Memory growth (leak slope)", "Bps", ((_q("kilorl_memory_leak_slope_bytes_per_second{SEL}"),
                                                 "{{role}}[{{rank}}] {{memory}}"),)),
    Panel("Predicted time to memory limit", "s", ((_q("min by (role, rank, node, memory) "
                                                      "(kilorl_memory_time_to_limit_seconds{SEL})"),
                                                   "{{role}}[{{rank}}] {{memory}}"),),
          description="+Inf while no leak is suspected."),
    Panel("Leaks suspected", "none", ((_q("max by (role, rank, node) (kilorl_memory_leak_suspected{SEL})"),
                                       "{{role}}[{{rank}}] {{node}}"),)),
    Panel("Migration events", "none", ((_q("sum by (subject_role, event) (increase(kilorl_migration_events_total{SEL}[RATE]))"),
                                        "{{subject_role}} {{event}}"),)),
    Panel("Roles reporting", "none", ((_q("sum by (node) (kilorl_role_up{SEL})"), "{{node}}"),
                                      ('sum(up{job="kilorl"})', "exporters up"))),
)


def resolve(expr: str, *, rate: str = "1m", role: str = ".*", node: str = ".*") -> str:
    """A panel query with Grafana's placeholders filled in, as plain PromQL."""
    return expr.replace(RATE, rate).replace("$role", role).replace("$node", node)


def build_dashboard():
    """The grafanalib Dashboard object."""
    from grafanalib import core as g

    panels = []
    for i, p in enumerate(PANELS):
        targets = [g.Target(expr=expr, legendFormat=legend, refId=chr(ord("A") + k), datasource=DATASOURCE)
                   for k, (expr, legend) in enumerate(p.queries)]
        panels.append(g.TimeSeries(title=p.title, dataSource=DATASOURCE, targets=targets, unit=p.unit,
                                   description=p.description, gridPos=g.GridPos(h=8, w=12, x=12 * (i % 2), y=8 * (i // 2))))

    def var(name: str) -> g.Template:
        return g.Template(name=name, label=name, query=f"label_values(kilorl_role_up, {name})", dataSource=DATASOURCE,
                          includeAll=True, multi=True, allValue=".*", default="All", refresh=2)

    return g.Dashboard(
        title="kiloRL run", uid=UID, tags=["kilorl"], refresh="10s", timezone="utc",
        inputs=[g.DataSourceInput(name="DS_PROMETHEUS", label="Prometheus", pluginId="prometheus", pluginName="Prometheus")],
        templating=g.Templating(list=[var("role"), var("node")]),
        panels=panels,
    ).auto_panel_ids()


def dashboard_json() -> str:
    """The dashboard as the JSON text committed in the repository."""
    from grafanalib._gen import DashboardEncoder

    return json.dumps(build_dashboard().to_json_data(), cls=DashboardEncoder, sort_keys=True, indent=2) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m kilorl.monitor.dashboard", description="Regenerate the Grafana dashboard JSON.")
    p.add_argument("--out", type=Path, default=DASHBOARD_PATH)
    a = p.parse_args(argv)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(dashboard_json())
    print(a.out)


if __name__ == "__main__":
    main()
