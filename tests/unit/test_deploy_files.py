"""The deploy files as a platform team would apply them: the Kubernetes manifests against the Kubernetes
schemas (strict, offline, from the kubernetes-validate wheel), and the rules that make them run: numeric
non-root users, pinned images, a governing Service for the StatefulSet, disruption budgets, grace periods
longer than the drain, the same Secret for every component that talks to Cassandra, pods that wait for
the migration Job. The compose file and the Procfile are checked for what a trial needs."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes" / "tickd.yaml"
COMPOSE = ROOT / "deploy" / "compose" / "docker-compose.yml"
DOCKERFILE = ROOT / "deploy" / "container" / "Dockerfile"
KUBERNETES_VERSION = "1.30.0"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d]


def _by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in _docs() if d["kind"] == kind]


def _workloads() -> list[dict[str, Any]]:
    return [d for d in _docs() if d["kind"] in ("Deployment", "StatefulSet", "Job")]


def _pod(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


@pytest.mark.parametrize("doc", _docs(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_manifest_is_valid_for_kubernetes(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_pods_run_as_a_numeric_non_root_user_with_nothing_extra() -> None:
    for workload in _workloads():
        pod = _pod(workload)
        security = pod["securityContext"]
        assert security["runAsNonRoot"] is True and isinstance(security["runAsUser"], int), workload["metadata"]
        assert security["runAsUser"] != 0 and security["seccompProfile"]["type"] == "RuntimeDefault"
        for container in _containers(pod):
            c_security = container["securityContext"]
            assert c_security["allowPrivilegeEscalation"] is False, container["name"]
            assert c_security["readOnlyRootFilesystem"] is True, container["name"]
            assert c_security["capabilities"]["drop"] == ["ALL"], container["name"]
            assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]


def test_images_are_pinned_to_this_version() -> None:
    for workload in _workloads():
        for container in _containers(_pod(workload)):
            assert container["image"].endswith(f":{VERSION}"), container["image"]


def test_every_component_gets_the_secret_and_waits_for_the_migration() -> None:
    for workload in _workloads():
        pod = _pod(workload)
        for container in _containers(pod):
            refs = [next(iter(r.values()))["name"] for r in container["envFrom"]]
            assert refs == ["tickd", "tickd"] and "secretRef" in container["envFrom"][1], container["name"]
        if workload["kind"] != "Job":
            init = pod["initContainers"][0]
            assert init["command"][:2] == ["tickd-migrate", "--wait"], workload["metadata"]["name"]
    (job,) = _by_kind("Job")
    assert _pod(job)["containers"][0]["command"] == ["tickd-migrate"]


def test_pollers_have_a_headless_governing_service_and_probes_that_tell_fencing_from_death() -> None:
    (poller,) = _by_kind("StatefulSet")
    services = {s["metadata"]["name"]: s for s in _by_kind("Service")}
    governing = services[poller["spec"]["serviceName"]]
    assert governing["spec"]["clusterIP"] == "None"
    assert governing["spec"]["selector"] == poller["spec"]["selector"]["matchLabels"]
    container = _pod(poller)["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_grace_periods_outlast_the_drain_and_every_workload_has_a_disruption_budget() -> None:
    (config,) = _by_kind("ConfigMap")
    drain_s = float(config["data"]["TICKD_SHUTDOWN_DEADLINE_S"])
    budgets = [b["spec"]["selector"]["matchLabels"] for b in _by_kind("PodDisruptionBudget")]
    for workload in _workloads():
        if workload["kind"] == "Job":
            continue
        pod = _pod(workload)
        container = pod["containers"][0]
        pre_stop_s = float(container["lifecycle"]["preStop"]["exec"]["command"][1])
        assert pod["terminationGracePeriodSeconds"] >= pre_stop_s + drain_s + 10, workload["metadata"]["name"]
        assert workload["spec"]["selector"]["matchLabels"] in budgets, workload["metadata"]["name"]


def test_dockerfile_is_multi_stage_with_a_numeric_user_and_a_dependency_layer() -> None:
    text = DOCKERFILE.read_text()
    assert len(re.findall(r"^FROM ", text, re.M)) == 2
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and re.fullmatch(r"\d+:\d+", users[-1]) and not users[-1].startswith("0")
    deps = text.index("-r requirements.txt")
    assert deps < text.index("COPY schema"), "dependencies must be built before the source is copied"


def test_compose_file_has_the_trial_topology() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert {"cassandra", "kafka", "migrate", "api", "poller-1", "poller-2"} <= set(services)
    for name, service in services.items():
        for needed in service.get("depends_on", {}):
            assert needed in services, f"{name} depends on unknown {needed}"
    ids = {services[p]["environment"]["TICKD_NODE_ID"] for p in ("poller-1", "poller-2")}
    assert len(ids) == 2
    assert services["api"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert all(p.startswith("127.0.0.1:") for p in services["api"]["ports"])
    docker = shutil.which("docker")
    if docker is not None and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        run = subprocess.run([docker, "compose", "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr


def test_procfile_pollers_do_not_collide() -> None:
    lines = [ln for ln in (ROOT / "deploy" / "Procfile").read_text().splitlines() if ln and not ln.startswith("#")]
    pollers = [ln for ln in lines if "tickd-poller" in ln]
    assert len(pollers) >= 2
    for key in ("TICKD_NODE_ID", "TICKD_METRICS_PORT"):
        values = [re.search(rf"{key}=(\S+)", ln) for ln in pollers]
        assert all(values) and len({v.group(1) for v in values if v}) == len(pollers), key


LOCK = ROOT / "requirements" / "lock.txt"
RUNTIME_LOCK = ROOT / "requirements" / "runtime.txt"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def _pins(path: Path) -> dict[str, str]:
    """name -> version of every package in a lock file, each checked to carry at least one hash."""
    from packaging.utils import canonicalize_name

    pins: dict[str, str] = {}
    hashed: set[str] = set()
    name = ""
    for line in path.read_text().splitlines():
        if match := _PIN.match(line):
            name = canonicalize_name(match.group(1))
            assert name not in pins, f"{path.name}: {name} pinned twice"
            pins[name] = match.group(2)
        elif line.strip().startswith("--hash=sha256:"):
            hashed.add(name)
        elif line and not line.startswith(("#", " ")):
            raise AssertionError(f"{path.name}: not a pin: {line!r}")
    assert set(pins) <= hashed, f"{path.name}: pinned without a hash: {sorted(set(pins) - hashed)}"
    return pins


def _requirements(pyproject: Path, extra: str | None = None) -> list[Any]:
    from packaging.requirements import Requirement

    project = tomllib.loads(pyproject.read_text())["project"]
    found = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    return [Requirement(r) for r in found]


def test_dockerfile_installs_the_committed_runtime_lock_with_hashes_then_tickd_without_deps() -> None:
    text = DOCKERFILE.read_text()
    copied = re.search(r"^COPY (\S+) \./requirements\.txt$", text, re.M)
    assert copied, "the Dockerfile must copy a committed lock file to requirements.txt"
    assert (ROOT / copied.group(1)).resolve() == RUNTIME_LOCK
    install = next(ln for ln in text.splitlines() if "-r requirements.txt" in ln)
    assert "--require-hashes" in install, install
    assert text.index(copied.group(0)) < text.index("COPY schema")
    assert re.search(r"^RUN pip wheel .*--no-deps .* \.$", text, re.M), "tickd itself must be built with --no-deps"
    assert "--no-index" in next(ln for ln in text.splitlines() if ln.startswith("RUN pip install"))


def test_lock_files_pin_every_dependency_within_pyproject_and_the_image_gets_no_test_tools() -> None:
    from packaging.utils import canonicalize_name

    lock, runtime = _pins(LOCK), _pins(RUNTIME_LOCK)
    tickd, sdk = ROOT / "pyproject.toml", ROOT / "sdk" / "python" / "pyproject.toml"
    wanted = {
        LOCK: [*_requirements(tickd), *_requirements(tickd, "test"), *_requirements(sdk)],
        RUNTIME_LOCK: _requirements(tickd),
    }
    for path, requirements in wanted.items():
        pins = lock if path == LOCK else runtime
        for requirement in requirements:
            name = canonicalize_name(requirement.name)
            assert name in pins, f"{path.name} lacks {name}: run make lock"
            assert requirement.specifier.contains(pins[name], prereleases=True), (
                f"{path.name}: {name}=={pins[name]} is outside {requirement}: run make lock"
            )
    assert {n: lock.get(n) for n in runtime} == runtime, "the image must get the versions make install tests with"
    tools = {canonicalize_name(r.name) for r in _requirements(tickd, "test")}
    # A test tool may be in the image only as a runtime package's own dependency (PyYAML: swagger-ui-py's).
    vias = _vias(RUNTIME_LOCK)
    leaked = sorted(n for n in tools & set(runtime) if not vias.get(n, set()) - {"tickd (pyproject.toml)"})
    assert not leaked, f"test tools in the image's lock that no runtime package needs: {leaked}"


def _vias(path: Path) -> dict[str, set[str]]:
    """name -> the packages a lock file says it is there for (its ``# via`` lines, constraints left out)."""
    from packaging.utils import canonicalize_name

    vias: dict[str, set[str]] = {}
    name = ""
    for line in path.read_text().splitlines():
        if match := _PIN.match(line):
            name = canonicalize_name(match.group(1))
            vias[name] = set()
        elif (text := line.strip()).startswith("#") and name:
            why = text.lstrip("#").strip().removeprefix("via").strip()
            if why and not why.startswith("-c "):
                vias[name].add(why)
    return vias


def test_make_install_installs_from_the_lock_and_reinstalls_when_it_changes() -> None:
    makefile = (ROOT / "Makefile").read_text()
    stamp = re.search(r"^\$\(STAMP\): (.*)$", makefile, re.M)
    assert stamp and "requirements/lock.txt" in stamp.group(1).split()
    assert re.search(r"pip install .*--require-hashes -r requirements/lock\.txt", makefile)
    editable = re.search(r"pip install .*-e \. .*$", makefile, re.M)
    assert editable and "--no-deps" in editable.group(0)
