"""The tickd SDK: ``Tickd`` (blocking) and ``AsyncTickd`` (asyncio) with the same surface, typed answers,
one exception class per kind of failure, auto-paging list iterators, Idempotency-Keys and safe retries;
``verify_webhook`` checks a signed callback (``tickd_client.webhooks``)."""

from tickd_client._async import AsyncTickd
from tickd_client._sync import Tickd
from tickd_client.calls import Call, RuleFields, ScheduleChanges, ScheduleFields
from tickd_client.errors import (
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    RateLimited,
    TickdError,
    Unauthorized,
    Unavailable,
)
from tickd_client.models import (
    ApiKey,
    BatchItem,
    BatchItemError,
    Client,
    Cluster,
    DeadLetter,
    HttpCallback,
    Instance,
    KafkaCallback,
    Node,
    Occurrence,
    Policy,
    Recurrence,
    Redrive,
    RedriveError,
    Release,
    Run,
    Schedule,
    SigningSecret,
)
from tickd_client.retry import NO_RETRY, RetryPolicy
from tickd_client.webhooks import WebhookVerificationError
from tickd_client.webhooks import verify as verify_webhook

__all__ = [
    "NO_RETRY",
    "ApiKey",
    "AsyncTickd",
    "BatchItem",
    "BatchItemError",
    "Call",
    "Client",
    "Cluster",
    "Conflict",
    "DeadLetter",
    "Forbidden",
    "HttpCallback",
    "Instance",
    "Invalid",
    "KafkaCallback",
    "Node",
    "NotFound",
    "Occurrence",
    "Policy",
    "RateLimited",
    "Recurrence",
    "Redrive",
    "RedriveError",
    "Release",
    "RetryPolicy",
    "RuleFields",
    "Run",
    "Schedule",
    "ScheduleChanges",
    "ScheduleFields",
    "SigningSecret",
    "Tickd",
    "TickdError",
    "Unauthorized",
    "Unavailable",
    "WebhookVerificationError",
    "verify_webhook",
]
