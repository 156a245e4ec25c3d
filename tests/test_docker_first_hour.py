"""The shipped Docker configuration is quiet at start-up and its health check means "alive"."""

from __future__ import annotations

from pathlib import Path

from config import load_gateway

ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_docker_config_starts_without_warnings() -> None:
    loaded = load_gateway(ROOT / "examples" / "docker" / "gateway.yaml", env={})
    assert loaded.warnings == []
    api = loaded.profiles["web"].channels[0]
    assert api.type == "api"
    assert api.host == "0.0.0.0"


def test_the_healthcheck_decision_is_written_down() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert 'reflects "alive" (/healthz), not "ready" (/readyz)' in dockerfile
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "HEALTHCHECK" in readme
    assert "alive" in readme
