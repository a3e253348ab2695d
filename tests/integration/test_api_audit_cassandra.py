"""The audit trail on Cassandra: the API tests of ``tests/unit/api/test_api_audit.py`` on the real store
(records written after each confirmed change, read back per schedule and per tenant across pages)."""

from __future__ import annotations

from tests.unit.api.test_api_audit import (
    test_a_batch_records_each_schedule_it_made,
    test_a_tenant_sees_only_its_own_trail,
    test_admin_changes_and_key_rotation_show_who,
    test_each_confirmed_change_of_a_schedule_is_one_record,
)

pytest_plugins = ["tests.integration.api_fixtures"]

__all__ = [
    "test_a_batch_records_each_schedule_it_made",
    "test_a_tenant_sees_only_its_own_trail",
    "test_admin_changes_and_key_rotation_show_who",
    "test_each_confirmed_change_of_a_schedule_is_one_record",
]
