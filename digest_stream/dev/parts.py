"""A store backend's part of the local stack, as `digest-stream dev` drives it.

Each backend names the module of its part (``StoreBackend.dev_part``, a string: the store
sits below dev/ and imports nothing of it); that module's ``PART`` is a ``DevPart``. The
stack and the CLI load the part of the backend the ``store`` setting chooses and speak only
this protocol, so a second backend adds ``dev/<name>.py`` and touches neither.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Protocol

from pydantic import ValidationError

from digest_stream.dev.process import StackError
from digest_stream.ops.config import describe_error
from digest_stream.settings import chosen_store
from digest_stream.store.backend import StoreBackend
from digest_stream.store.backends import DEFAULT_STORE, backends


class DevPart(Protocol):
    """The local servers of one store backend: started, stopped, asked, exported."""

    #: The backend's name in the help of `digest-stream dev` ("Redis").
    label: str
    #: The help of `dev up --cluster`: what its cluster is.
    cluster_help: str

    def up(self, cluster: bool) -> None:
        """Start its servers (and with cluster, its cluster) unless they run."""
        ...

    def down(self) -> None:
        """Stop every server of it that this stack started; remove their data."""
        ...

    def status(self) -> dict[str, bool]:
        """Which of its servers answer, by the names `dev status` prints."""
        ...

    def cluster_running(self) -> bool:
        """Whether its cluster answers."""
        ...

    def exports(self, cluster: bool) -> list[str]:
        """The shell export lines that point the settings (and the tests) at it."""
        ...

    def ready(self, states: Mapping[str, bool]) -> bool:
        """Whether what `status` found is enough for `dev status` to succeed."""
        ...


def part_of(backend: StoreBackend) -> DevPart:
    """The dev part a backend names (its module's ``PART``)."""
    part: DevPart = importlib.import_module(backend.dev_part).PART
    return part


def chosen_part() -> DevPart:
    """The dev part of the backend the ``store`` setting chooses (redis by default)."""
    try:
        name = chosen_store()
    except ValidationError as exc:
        raise StackError(describe_error(exc)[0]) from exc  # as every command words it
    except ValueError as exc:  # the TOML file (ConfigFileError), one line already
        raise StackError(str(exc)) from exc
    return part_of(backends()[name])


def default_part() -> DevPart:
    """The dev part of the default backend (its words in the help: no setting read)."""
    return part_of(backends()[DEFAULT_STORE])


def every_part() -> list[DevPart]:
    """Every backend's dev part: `dev down` stops them all, whatever the setting says now."""
    return [part_of(backend) for backend in backends().values()]
