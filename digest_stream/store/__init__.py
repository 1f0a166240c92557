"""The digest store: timelines and their schedule, scoped by input partition.

``connect(settings)`` gives the store the settings name: ``RedisStore``, the production
store (Redis Functions, single node or cluster, under ``store/redis/``, the one part of the
package that imports redis-py); ``MemoryStore`` is the reference model with the same
interface and semantics. Every store raises only the errors of ``store.errors``.
"""

from __future__ import annotations

from digest_stream.store.backends import SERVER_CODE, StoreSettings, backend_error, connect
from digest_stream.store.base import (
    DEFAULT_SLICE,
    DIGEST_ID_PATTERN,
    AddResult,
    DigestStore,
    DigestTarget,
    DueBatch,
    DueTimeline,
    Fence,
    NewRecord,
    OpenDigest,
    PartitionStats,
    Readiness,
    StoredRecord,
    TimelineInfo,
)
from digest_stream.store.errors import (
    BackendError,
    InvalidArgument,
    InvalidState,
    LibraryVersionMismatch,
    StoreError,
    StoreUnavailable,
)
from digest_stream.store.memory import MemoryStore
from digest_stream.store.policy import PolicyResolver, TimelinePolicy
from digest_stream.store.redis import RedisStore

__all__ = [
    "DEFAULT_SLICE",
    "DIGEST_ID_PATTERN",
    "SERVER_CODE",
    "AddResult",
    "BackendError",
    "DigestStore",
    "DigestTarget",
    "DueBatch",
    "DueTimeline",
    "Fence",
    "InvalidArgument",
    "InvalidState",
    "LibraryVersionMismatch",
    "MemoryStore",
    "NewRecord",
    "OpenDigest",
    "PartitionStats",
    "PolicyResolver",
    "Readiness",
    "RedisStore",
    "StoreError",
    "StoreSettings",
    "StoreUnavailable",
    "StoredRecord",
    "TimelineInfo",
    "TimelinePolicy",
    "backend_error",
    "connect",
]
