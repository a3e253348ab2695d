"""If-Match on Cassandra: the version tests of ``tests/unit/api/test_api_versions.py`` run here on the real
store, where the check and the write are a lightweight transaction (20 concurrent PATCHes of one version:
exactly one applies, the others answer 412 and change nothing)."""

from __future__ import annotations

from tests.unit.api.test_api_versions import (
    test_a_stale_if_match_changes_nothing,
    test_by_key_put_and_delete_take_if_match,
    test_every_change_moves_the_version_and_the_etag_is_it,
    test_twenty_concurrent_patches_of_one_version_one_wins,
)

pytest_plugins = ["tests.integration.api_fixtures"]

__all__ = [
    "test_a_stale_if_match_changes_nothing",
    "test_by_key_put_and_delete_take_if_match",
    "test_every_change_moves_the_version_and_the_etag_is_it",
    "test_twenty_concurrent_patches_of_one_version_one_wins",
]
