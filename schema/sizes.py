"""What a schedule's writes weigh in a Cassandra batch, for grouping them under TICKD_BATCH_MAX_BYTES.

Cassandra refuses a batch spanning several partitions whose data is over ``batch_size_fail_threshold``
(50 KiB by default), whatever else it holds, and it refuses it every time it is retried.
"""

from __future__ import annotations

from tickd.schema.model import Schedule, encode_callback, encode_options

# What a create writes besides the payload, callback and options (keys, timestamps, the by-id pointer,
# the pollers' signals, and Cassandra's per-cell overhead), rounded up.
CREATE_OVERHEAD_BYTES = 1280


def create_bytes(s: Schedule) -> int:
    """About how many bytes a schedule's create writes add to a batch, erring high."""
    options = len(encode_options(s.options).encode()) if s.options is not None else 0
    return len(s.payload) + len(encode_callback(s.callback).encode()) + options + CREATE_OVERHEAD_BYTES
