"""``pip install sdk/python`` into a fresh virtualenv gives an importable, typed ``tickd_client`` and
the ``tickd`` command, with httpx its only dependency (pip fetches it from the index or its cache)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

SDK = Path(__file__).resolve().parents[2] / "sdk" / "python"


def _run(*argv: str | Path) -> str:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=True, timeout=300).stdout


def test_pip_install_into_a_fresh_venv(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(SDK, source, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build"))
    _run(sys.executable, "-m", "venv", tmp_path / "venv")
    bin_dir = tmp_path / "venv" / "bin"
    _run(bin_dir / "pip", "install", "--quiet", "--disable-pip-version-check", source)
    probe = (
        "import importlib.resources as r, tickd_client;"
        "print(tickd_client.Tickd.__name__, r.files('tickd_client').joinpath('py.typed').is_file())"
    )
    assert _run(bin_dir / "python", "-c", probe).split() == ["Tickd", "True"]
    assert "usage: tickd" in _run(bin_dir / "tickd", "--help")
    installed = _run(bin_dir / "pip", "list", "--format=freeze")
    assert "tickd-client==0.1.0" in installed and "aiohttp" not in installed
