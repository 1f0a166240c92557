"""The digest store: timelines and their schedule, scoped by input partition.

``connect(settings)`` gives the store the ``store`` setting chooses among the backends
``store.backends`` lists (each under ``store/<backend>/``, with its settings section and its
words: the production one is ``store/redis/``, the one part of the package that imports
redis-py); ``MemoryStore`` is the reference model with the same interface and semantics.
Every store raises only the errors of ``store.errors``.
"""

from __future__ import annotations

from digest_stream.store.backend import StoreBackend, StoreSettings
from digest_stream.store.backends import (
    backend_error,
    backend_of,
    backend_raising,
    connect,
    secret_urls,
)
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

__all__ = [
    "DEFAULT_SLICE",
    "DIGEST_ID_PATTERN",
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
    "StoreBackend",
    "StoreError",
    "StoreSettings",
    "StoreUnavailable",
    "StoredRecord",
    "TimelineInfo",
    "TimelinePolicy",
    "backend_error",
    "backend_of",
    "backend_raising",
    "connect",
    "secret_urls",
]
