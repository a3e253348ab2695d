"""The deploy files agree with where ``/metrics`` is served: every pod Prometheus is told to scrape serves
``/metrics`` without a token on the annotated port, and the API's metrics port is not in its Service (the
API port's ``/metrics`` wants the admin token, which a scraper should not hold)."""

from __future__ import annotations

from typing import Any

from tests.unit.test_deploy_files import _by_kind, _pod
from tickd.service.settings import ApiSettings


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def _scraped() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, its first container) for each workload whose pods carry prometheus.io/scrape."""
    found = []
    for workload in (*_by_kind("Deployment"), *_by_kind("StatefulSet")):
        annotations = workload["spec"]["template"]["metadata"].get("annotations", {})
        if annotations.get("prometheus.io/scrape") == "true":
            found.append((workload, _pod(workload)["containers"][0]))
    return found


def test_every_scraped_pod_declares_the_annotated_port_and_path() -> None:
    scraped = _scraped()
    assert {w["metadata"]["name"] for w, _ in scraped} == {"tickd-api", "tickd-poller"}
    for workload, container in scraped:
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        ports = {p["containerPort"]: p["name"] for p in container["ports"]}
        assert ports.get(int(annotations["prometheus.io/port"])) == "metrics", workload["metadata"]["name"]
        assert annotations["prometheus.io/path"] == "/metrics"


def test_the_api_serves_metrics_on_the_scraped_port_outside_its_service() -> None:
    (api,) = [(w, c) for w, c in _scraped() if w["metadata"]["name"] == "tickd-api"]
    workload, container = api
    settings = ApiSettings.from_env(_env(container))  # the API as the pod's env configures it
    assert settings.metrics_port == int(workload["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"])
    assert settings.metrics_host == "0.0.0.0" and settings.metrics_auth == "admin"
    (service,) = [s for s in _by_kind("Service") if s["metadata"]["name"] == "tickd-api"]
    assert {p["targetPort"] for p in service["spec"]["ports"]} == {"http"}
