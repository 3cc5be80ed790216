"""The targets file Prometheus follows, and the scrape configuration that follows it."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from kilorl.monitor.discovery import TargetsFile, node_socket_path, write_prometheus_config
from tests.monitor.conftest import PROMTOOL


def test_the_targets_file_lists_every_node_and_follows_changes(tmp_path):
    tf = TargetsFile(tmp_path / "sd" / "targets.json")
    assert json.loads(tf.path.read_text()) == []
    tf.set("n0", "127.0.0.1:9464")
    tf.set("n1", "127.0.0.1:9465")
    tf.set("n0", "127.0.0.1:9470")  # n0's exporter moved
    tf.remove("n1")
    groups = json.loads(tf.path.read_text())
    assert groups == [{"targets": ["127.0.0.1:9470"], "labels": {"exporter_node": "n0"}}]
    assert [p.name for p in tf.path.parent.iterdir()] == ["targets.json"]  # no temporary files left behind
    assert TargetsFile(tf.path).targets == {"n0": "127.0.0.1:9470"}  # a restarted driver picks up where it was


def test_a_bad_address_names_the_field(tmp_path):
    with pytest.raises(ValueError, match="'address' must be host:port"):
        TargetsFile(tmp_path / "t.json").set("n0", "localhost")


def test_the_generated_config_uses_file_sd_and_passes_promtool(tmp_path):
    cfg = write_prometheus_config(tmp_path / "prometheus.yml", tmp_path / "targets.json", scrape_interval_s=1.5)
    data = yaml.safe_load(cfg.read_text())
    job = data["scrape_configs"][0]
    assert job["file_sd_configs"][0]["files"] == [str((tmp_path / "targets.json").resolve())]
    assert job["scrape_interval"] == "1500ms" and job["honor_labels"] is True
    out = subprocess.run([PROMTOOL, "check", "config", str(cfg)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_socket_paths_are_short_and_safe():
    assert node_socket_path("/tmp/k", "node/1:a").name == "node_1_a.sock"
