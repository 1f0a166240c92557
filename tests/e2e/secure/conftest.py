"""Fixtures of the secured stack: its stack.json, and one test's names and users on it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from digest_stream.store.redis import RedisStore
from tests.support.secure import ABSENT, SecureNames, SecureStack, secure_stack_path


@pytest.fixture(scope="session")
def secure_stack() -> SecureStack:
    """The running secured stack, its library loaded by admin; skipped when absent (not in CI)."""
    path = secure_stack_path()
    if path is None:
        if os.environ.get("CI"):
            # CI starts it (`make test` -> `dev up --secure`): its absence is a failure.
            pytest.fail(ABSENT)
        pytest.skip(ABSENT)
    stack = SecureStack.load(path)
    # The admin loads this checkout's library (as production recommends); the service users
    # run with redis_load_library=false and may not load it.
    with stack.redis_admin() as admin:
        RedisStore(admin, namespace="d", load_library=True)
    return stack


@pytest.fixture
def secure_names(secure_stack: SecureStack) -> Iterator[SecureNames]:
    """Unique topics, groups and namespace, with the README's Redis ACL user for them."""
    names = SecureNames(secure_stack)
    names.create_redis_user()
    yield names
    names.cleanup()
