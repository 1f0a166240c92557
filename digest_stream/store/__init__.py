"""The digest store: timelines and their schedule, scoped by input partition.

``RedisStore`` is the production store (Redis Functions, single node or cluster);
``MemoryStore`` is the reference model with the same interface and semantics.
"""

from __future__ import annotations

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
    StoredRecord,
    TimelineInfo,
)
from digest_stream.store.errors import (
    InvalidArgument,
    InvalidState,
    LibraryVersionMismatch,
    StoreError,
)
from digest_stream.store.memory import MemoryStore
from digest_stream.store.policy import PolicyResolver, TimelinePolicy
from digest_stream.store.redis import RedisStore

__all__ = [
    "DEFAULT_SLICE",
    "DIGEST_ID_PATTERN",
    "AddResult",
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
    "RedisStore",
    "StoreError",
    "StoredRecord",
    "TimelineInfo",
    "TimelinePolicy",
]
