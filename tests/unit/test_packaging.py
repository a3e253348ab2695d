"""One import namespace: the three top folders install as ``tickd.schema``, ``tickd.service`` and
``tickd.poller``, so tickd's wheel and PyPI's ``schema`` package live in one virtualenv and both work.

The wheel test builds tickd's wheel, installs it with its pinned dependencies (requirements/runtime.txt, as
the image does) and PyPI's ``schema`` into a fresh virtualenv, and runs both from outside the repository,
where the checkout's folders cannot shadow anything. pip fetches from the index or its cache.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = ("schema", "service", "poller")
OLD_IMPORT = re.compile(r"^\s*(?:from|import) (?:schema|service|poller)(?:\.|\s|$)", re.M)


def _run(*argv: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600, cwd=cwd)
    assert done.returncode == 0, f"{argv}: {done.stderr[-3000:]}"
    return done.stdout


def test_the_package_list_names_every_folder_of_the_three_packages() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {"tickd": "."}
    folders = {
        "tickd." + ".".join(path.relative_to(ROOT).parts)
        for top in TOP
        for path in [ROOT / top, *(ROOT / top).rglob("*")]
        if path.is_dir() and path.name != "__pycache__" and any(f.is_file() for f in path.iterdir())
    }
    assert set(config["packages"]) == folders


def test_no_module_imports_the_old_top_level_names() -> None:
    # A module imported as both schema.x and tickd.schema.x would be two modules with two sets of classes.
    offenders = [
        f"{path.relative_to(ROOT)}: {match.group(0).strip()}"
        for top in (*TOP, "tests", "bench", "deploy")
        for path in (ROOT / top).rglob("*.py")
        for match in OLD_IMPORT.finditer(path.read_text())
    ]
    assert offenders == []


# Run from a temporary directory by the virtualenv's python: PyPI's schema validates, and tickd's API over
# the in-memory store answers a create and reads it back.
PROBE = """
import asyncio, schema, tickd.schema, tickd.service.app
from datetime import UTC, datetime
from aiohttp.test_utils import TestClient, TestServer
assert "site-packages" in schema.__file__ and "site-packages" in tickd.schema.__file__, (schema, tickd.schema)
assert schema.Schema({"n": int}).validate({"n": 3}) == {"n": 3}
assert not schema.Schema(int).is_valid("3")
from tickd.schema.memory import memory_store
from tickd.service.settings import ApiSettings

async def main():
    settings = ApiSettings.from_env(
        {"TICKD_ADMIN_TOKEN": "admin-token-for-the-wheel-test", "TICKD_CALLBACK_ALLOW_PRIVATE": "true"}
    )
    app = tickd.service.app.create_app(settings, memory_store(lambda: datetime.now(UTC)))
    async with TestClient(TestServer(app)) as http:
        made = await http.post("/v1/clients", json={"client_id": "wheel", "poller_count": 1},
                               headers={"Authorization": "Bearer admin-token-for-the-wheel-test"})
        assert made.status == 201, await made.text()
        key = (await made.json())["api_key"]
        auth = {"Authorization": f"Bearer {key}"}
        body = {"delay_s": 3600, "callback": {"type": "http", "url": "http://127.0.0.1:9/hook"}}
        created = await http.post("/v1/schedules", json=body, headers=auth)
        assert created.status == 201, await created.text()
        read = await http.get(f"/v1/schedules/{(await created.json())['schedule_id']}", headers=auth)
        assert read.status == 200 and (await read.json())["status"] == "scheduled"
    print("both work")

asyncio.run(main())
"""


def test_the_wheel_installs_beside_pypi_schema_and_both_work(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", wheels, ROOT)
    (wheel,) = wheels.glob("tickd-*.whl")
    _run(sys.executable, "-m", "venv", tmp_path / "venv")
    pip = [tmp_path / "venv" / "bin" / "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run(*pip, "--require-hashes", "-r", ROOT / "requirements" / "runtime.txt")
    _run(*pip, "--no-deps", wheel, "schema==0.7.8")
    assert _run(tmp_path / "venv" / "bin" / "python", "-c", PROBE, cwd=tmp_path).splitlines()[-1] == "both work"
    assert "usage" in _run(tmp_path / "venv" / "bin" / "tickd-migrate", "--help", cwd=tmp_path).lower()
