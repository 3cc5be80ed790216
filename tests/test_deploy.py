"""deploy/: the container image and the KubeRay examples agree with each other and with the CLI."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def _ray_version_of_image() -> str:
    return re.search(r"^ARG RAY_VERSION=(\S+)$", (DEPLOY / "Dockerfile").read_text(), re.M).group(1)


def test_each_kuberay_example_asks_for_the_ray_of_the_image_and_runs_the_kilorl_image():
    for name in ("raycluster.yaml", "rayjob.yaml"):
        doc = yaml.safe_load((DEPLOY / "kuberay" / name).read_text())
        spec = doc["spec"].get("rayClusterSpec", doc["spec"])
        assert spec["rayVersion"] == _ray_version_of_image(), name
        groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
        for group in groups:
            (container,) = group["template"]["spec"]["containers"]
            assert container["image"].startswith("kilorl:"), name
            assert {e["name"] for e in container["env"]} >= {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN"}, name


def test_the_rayjob_entrypoint_is_a_kilorl_train_command_the_cli_accepts():
    from kilorl.cli.main import build_parser

    entry = yaml.safe_load((DEPLOY / "kuberay" / "rayjob.yaml").read_text())["spec"]["entrypoint"]
    argv = shlex.split(entry)
    assert argv[:2] == ["kilorl", "train"] and "--address" in argv
    args = build_parser(argv[1:]).parse_args(argv[1:])
    assert args.address == "auto" and (DEPLOY.parent / args.config).exists()  # the image copies examples/
