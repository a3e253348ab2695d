"""The README's "SDK and CLI" examples, and the SDK README's "Calendars", "Timed pauses" and "Debounce by
key" ones, run as written against a fresh tickd-dev by a fresh virtualenv with only the SDK pip-installed into it (as a
client team would): the code blocks are read out of the READMEs, so the test breaks when a README and the
SDK or CLI drift apart."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sdk.conftest import Dev, running_dev

README = Path(__file__).resolve().parents[2] / "README.md"
SDK = README.parent / "sdk" / "python"


def _blocks(language: str, readme: Path = README, section: str = "SDK and CLI") -> list[str]:
    text = readme.read_text()
    found = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"^```{language}\n(.*?)^```$", found, flags=re.MULTILINE | re.DOTALL)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    with running_dev(tmp_path_factory.mktemp("readme")) as started:
        yield started


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with ``pip install`` of the SDK distribution (httpx from the index or pip's
    cache): its bin folder, holding python and the tickd command."""
    root = tmp_path_factory.mktemp("venv")
    source = root / "src"
    shutil.copytree(SDK, source, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build"))
    subprocess.run([sys.executable, "-m", "venv", root / "venv"], check=True, timeout=120)
    pip = [root / "venv" / "bin" / "pip", "install", "--quiet", "--disable-pip-version-check", source]
    subprocess.run(pip, check=True, timeout=300, capture_output=True)
    return root / "venv" / "bin"


def _env(dev: Dev, bin_dir: Path) -> dict[str, str]:
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    return {
        **os.environ,
        "PATH": path,
        "TICKD_URL": dev.url,
        "TICKD_API_KEY": dev.api_key,
        "TICKD_ADMIN_TOKEN": dev.admin_token,
    }


def _ran(example: str, dev: Dev, venv: Path, *, shell: bool = False) -> subprocess.CompletedProcess[str]:
    """A README example run as written (python, or bash with -euo pipefail) by the fresh virtualenv,
    against ``dev``; asserted to exit 0."""
    command = ["bash", "-euo", "pipefail", "-c", example] if shell else [venv / "python", "-c", example]
    ran = subprocess.run(
        command, capture_output=True, text=True, env=_env(dev, venv), timeout=120 if shell else 60, check=False
    )
    assert ran.returncode == 0, (ran.returncode, ran.stdout, ran.stderr)
    return ran


def test_the_section_has_one_python_and_one_shell_example() -> None:
    assert len(_blocks("python")) == 1 and len(_blocks("sh")) == 1


def test_the_sdk_example_runs(fresh: Dev, venv: Path) -> None:
    (example,) = _blocks("python")
    ran = _ran(example, fresh, venv)
    lines = ran.stdout.splitlines()
    assert re.match(r"[0-9a-f-]{36} \d{4}-\d\d-\d\d 0[23]:00:00\+00:00$", lines[0]), lines
    schedule_id = lines[0].split()[0]
    assert re.fullmatch(rf"triggered {schedule_id}:\d{{13}}", lines[1]), lines
    assert lines[2] == "by key True"
    assert lines[-1] == "refused: callback.url"


def test_the_cli_examples_run(fresh: Dev, venv: Path) -> None:
    (example,) = _blocks("sh")
    ran = _ran(example, fresh, venv, shell=True)
    assert '"client_id": "billing"' in ran.stdout and "cancelled" in ran.stdout
    assert "UTC offset -05:00 -> -04:00" in ran.stdout and "emails" in ran.stdout
    found = re.search(r"^schedule_id +(\S+)$", ran.stdout, flags=re.MULTILINE)  # tickd schedules get "$ID"
    assert found is not None
    schedule_id = found.group(1)
    assert re.search(r"^status +paused$", ran.stdout, flags=re.MULTILINE)
    assert f'"trigger_of": "{schedule_id}"' in ran.stdout and f'"fire_id": "{schedule_id}:' in ran.stdout
    by_key = [line for line in ran.stdout.splitlines() if re.fullmatch(r"[0-9a-f-]{36}", line)]
    assert len(by_key) == 2 and by_key[0] == by_key[1]  # put-by-key twice: one schedule
    assert re.search(r"^node_id +heartbeat_age_s", ran.stdout, flags=re.MULTILINE)


def _calendar_blocks(language: str) -> list[str]:
    return _blocks(language, SDK / "README.md", "Calendars")


def test_the_sdk_readme_has_one_python_and_one_shell_calendars_example() -> None:
    assert len(_calendar_blocks("python")) == 1 and len(_calendar_blocks("sh")) == 1


def test_the_sdk_readme_calendars_example_runs(fresh: Dev, venv: Path) -> None:
    (example,) = _calendar_blocks("python")
    ran = _ran(example, fresh, venv)
    *lines, listed = ran.stdout.splitlines()
    assert lines == [
        "holidays 1 ['sat', 'sun']",
        "2026-12-25 holidays v1",
        "2026-12-26 holidays v1",
        "2026-12-27 holidays v1",
        "2026-12-28 fires",
        "skips ['holidays']",
        "refused: precondition_failed",
    ]
    # The dev's client is shared by this module's examples: the root README's makes calendars of its own.
    assert ("holidays", 2) in ast.literal_eval(listed), listed


def test_the_sdk_readme_calendars_cli_example_runs(fresh: Dev, venv: Path) -> None:
    (example,) = _calendar_blocks("sh")
    ran = _ran(example, fresh, venv, shell=True)  # its delete matched version 1: it exited 0
    assert re.search(r"^ranges +2026-08-03T00:00:00/2026-08-17T00:00:00$", ran.stdout, flags=re.MULTILINE)
    assert re.search(r"^utc +local +timezone +excluded_by +note$", ran.stdout, flags=re.MULTILINE)
    assert ran.stdout.count("holidays v1") == 3  # the preview: the 25th, 26th and 27th
    assert '"weekdays": [\n    "sat",\n    "sun"\n  ]' in ran.stdout  # calendars get --output json


def _pause_blocks(language: str) -> list[str]:
    return _blocks(language, SDK / "README.md", "Timed pauses")


def test_the_sdk_readme_has_one_python_and_one_shell_timed_pause_example() -> None:
    assert len(_pause_blocks("python")) == 1 and len(_pause_blocks("sh")) == 1


def test_the_sdk_readme_timed_pause_example_runs(fresh: Dev, venv: Path) -> None:
    (example,) = _pause_blocks("python")
    ran = _ran(example, fresh, venv)
    assert ran.stdout.splitlines() == ["paused warehouse migration", "True", "scheduled None"]


def test_the_sdk_readme_timed_pause_cli_example_runs(fresh: Dev, venv: Path) -> None:
    (example,) = _pause_blocks("sh")
    ran = _ran(example, fresh, venv, shell=True)
    assert len(re.findall(r"^pause\.note +warehouse migration$", ran.stdout, flags=re.MULTILINE)) == 2  # pause, get
    until = re.findall(r"^pause\.until +(\S+)$", ran.stdout, flags=re.MULTILINE)
    assert len(until) == 2 and until[0] == until[1] and until[0].endswith("+00:00")
    assert re.search(rf"^due_at +{re.escape(until[0])}$", ran.stdout, flags=re.MULTILINE)
    assert re.search(r"^status +cancelled$", ran.stdout, flags=re.MULTILINE)


def _debounce_blocks(language: str) -> list[str]:
    return _blocks(language, SDK / "README.md", "Debounce by key")


def test_the_sdk_readme_has_one_python_and_one_shell_debounce_example() -> None:
    assert len(_debounce_blocks("python")) == 1 and len(_debounce_blocks("sh")) == 1


def test_the_sdk_readme_debounce_example_runs(fresh: Dev, venv: Path) -> None:
    (example,) = _debounce_blocks("python")
    ran = _ran(example, fresh, venv)
    assert ran.stdout.splitlines() == ["1 {'draft': 3} trailing", "0:00:30"]


def test_the_sdk_readme_debounce_cli_example_runs(fresh: Dev, venv: Path) -> None:
    (example,) = _debounce_blocks("sh")
    ran = _ran(example, fresh, venv, shell=True)
    ids = [line for line in ran.stdout.splitlines() if re.fullmatch(r"[0-9a-f-]{36}", line)]
    assert len(ids) == 3 and len(set(ids)) == 1  # put-by-key three times: one schedule
    shown = ran.stdout.split(ids[-1] + "\n", 1)[1]  # get-by-key, then cancel-by-key
    assert re.search(r"^debounce\.window_s +30\.0$", shown, flags=re.MULTILINE)
    assert re.search(r"^debounce\.max_wait_s +300\.0$", shown, flags=re.MULTILINE)
    assert re.search(r"^debounce\.edge +trailing$", shown, flags=re.MULTILINE)
    assert len(re.findall(r"^debounce\.first_put_at +\S+$", shown, flags=re.MULTILINE)) == 2  # get, cancel
    assert re.search(r'^payload +\{"draft": 3\}$', shown, flags=re.MULTILINE)
    assert re.search(r"^status +cancelled$", shown, flags=re.MULTILINE)


def _backfill_blocks(language: str) -> list[str]:
    return _blocks(language, SDK / "README.md", "Backfill")


def test_the_sdk_readme_has_one_python_and_one_shell_backfill_example() -> None:
    assert len(_backfill_blocks("python")) == 1 and len(_backfill_blocks("sh")) == 1


def test_the_sdk_readme_backfill_example_runs(fresh: Dev, venv: Path) -> None:
    (example,) = _backfill_blocks("python")
    ran = _ran(example, fresh, venv)
    assert ran.stdout.splitlines() == ["done 6 6", "0 6"]


def test_the_sdk_readme_backfill_cli_example_runs(fresh: Dev, venv: Path) -> None:
    (example,) = _backfill_blocks("sh")
    ran = _ran(example, fresh, venv, shell=True)
    assert re.search(r"^action +backfill$", ran.stdout, flags=re.MULTILINE)
    assert re.search(r"^state +done$", ran.stdout, flags=re.MULTILINE)
    assert re.search(r"^changed +6$", ran.stdout, flags=re.MULTILINE)
