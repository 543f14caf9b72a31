"""Deploy files: what can be checked without a Docker engine or a Kubernetes cluster is checked."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bus._transport.server import find_binary

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMPOSE = DEPLOY / "compose" / "docker-compose.yml"


@pytest.mark.parametrize("conf", sorted((DEPLOY / "nats").rglob("*.conf")), ids=lambda p: p.name)
def test_nats_configs_pass_nats_server_t(conf: Path) -> None:
    done = subprocess.run(
        [find_binary(), "-t", "-c", str(conf)], capture_output=True, text=True, check=False, cwd=conf.parent
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "is valid" in done.stdout + done.stderr


def images(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "image" and isinstance(value, str):
                found.append(value)
            else:
                found += images(value)
    elif isinstance(node, list):
        for item in node:
            found += images(item)
    return found


def test_compose_file() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert {
        "nats-1",
        "nats-2",
        "nats-3",
        "nats-exporter",
        "prometheus",
        "grafana",
        "hookbus",
        "hookbus-worker",
        "guard",
    } <= set(services)
    for image in images(compose):
        name, _, tag = image.rpartition(":")
        assert name and tag and tag != "latest", f"image {image!r} is not pinned"
    host_ports = [p.split(":")[0] for s in services.values() for p in s.get("ports", [])]
    assert len(host_ports) == len(set(host_ports)), "two services publish the same host port"
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (COMPOSE.parent / source).exists(), f"{name}: {source} does not exist"
        build = service.get("build")
        if build:
            assert (COMPOSE.parent / build["context"] / build["dockerfile"]).exists()
        for node in (1, 2, 3):  # every node's config is mounted where its command reads it
            if name == f"nats-{node}":
                assert f"/etc/nats/cluster-node-{node}.conf" in service["command"]
    url = services["hookbus"]["environment"]["NATS_URL"]
    assert url == "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222"
    assert "9477" in services["hookbus"]["command"]


def test_prometheus_targets_are_compose_services_on_their_ports() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    for job in scrape["scrape_configs"]:
        for target in job["static_configs"][0]["targets"]:
            host, port = target.split(":")
            assert host in services, f"{job['job_name']}: no service {host}"
            service = services[host]
            declared = " ".join(map(str, service.get("command", []))) + " ".join(service.get("ports", []))
            assert port in declared, f"{job['job_name']}: {host} does not listen on {port}"


def test_grafana_provisioning_matches_the_mounts() -> None:
    grafana = yaml.safe_load(COMPOSE.read_text())["services"]["grafana"]
    provider = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "dashboards" / "hookbus.yml").read_text())
    path = provider["providers"][0]["options"]["path"]
    assert any(v.endswith(f":{path}:ro") for v in grafana["volumes"])
    datasource = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"


def test_kubernetes_files() -> None:
    documents = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "hookbus.yaml").read_text()))
    assert [d["kind"] for d in documents] == ["Deployment", "ConfigMap", "Service"]
    for image in images(documents):
        assert ":" in image and not image.endswith(":latest")
    values = yaml.safe_load((DEPLOY / "kubernetes" / "nats-values.yaml").read_text())
    assert values["config"]["cluster"]["replicas"] == 3 and values["config"]["jetstream"]["enabled"]
    assert values["container"]["image"]["tag"].startswith("2.15")
    container = documents[0]["spec"]["template"]["spec"]["containers"][0]
    assert {p["containerPort"] for p in container["ports"]} == {p["targetPort"] for p in documents[2]["spec"]["ports"]}


def test_dockerfile_copies_what_exists() -> None:
    root = DEPLOY.parent
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (root / source).exists(), source
