"""Every benchmark module imports: they run only by hand (``make bench-*``), so a name they import that
moved away would otherwise go unnoticed until someone measures (bench-fire imported two helpers the
acceptance harness no longer had, from 6a31db6 until this test)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import bench

MODULES = sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if not m.name.startswith("_"))


def test_there_are_benchmarks() -> None:
    assert {"fire", "api", "ring"} <= set(MODULES), MODULES


@pytest.mark.parametrize("name", MODULES)
def test_a_benchmark_module_imports(name: str) -> None:
    module = importlib.import_module(f"bench.{name}")
    assert module.__name__ == f"bench.{name}"
