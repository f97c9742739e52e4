"""docker-compose.yml is accepted by Compose and runs what the design names."""

import os
import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def compose_command() -> list[str]:
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    assert shutil.which("docker-compose"), "no Compose to lint with (make test installs one)"
    return ["docker-compose"]


def test_compose_config_accepts_the_file():
    env = {**os.environ, "SECRET_KEY": "x" * 50}
    result = subprocess.run([*compose_command(), "config"], cwd=ROOT, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert {"postgres", "redis", "web", "worker", "beat", "keycloak", "prometheus"} <= set(
        services)
    for name in ("postgres", "redis", "web", "worker"):
        assert "healthcheck" in services[name], name
    assert services["web"]["environment"]["PORTAL_MODE"] == "production"
    assert "gunicorn" in str(services["web"]["command"])


def test_compose_refuses_to_start_without_a_secret_key():
    env = {k: v for k, v in os.environ.items() if k != "SECRET_KEY"}
    result = subprocess.run([*compose_command(), "config"], cwd=ROOT, env=env,
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_prometheus_config_is_valid_for_promtool():
    result = subprocess.run([shutil.which("promtool") or "promtool", "check", "config",
                             "--syntax-only", str(ROOT / "deploy" / "prometheus" /
                                                  "prometheus.yml")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
