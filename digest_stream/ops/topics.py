"""The service's topics while one is missing: one line naming it and `digest-stream topics
create`, the same line again at a slow interval while it stays missing, and one when it exists.

librdkafka says a subscribed topic is missing once per consumer, as its raw
``KafkaError{code=UNKNOWN_TOPIC_OR_PART,...}`` (and a producer only when a message times out
on it, minutes later). The consumers pick a topic up by themselves once it exists (their
metadata refresh, ``kafka.METADATA_REFRESH_MS``), so the service only waits, no restart: the
watch here looks the topics up meanwhile and says so in the service's words.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from digest_stream.kafka import METADATA_REFRESH_MS, admin_config
from digest_stream.ops.threads import name_os_thread
from digest_stream.settings import Settings

log = logging.getLogger(__name__)

#: Seconds between two lines about the same missing topics: an operator sees the cause at the
#: start and again now and then, without a line per metadata refresh.
REMIND_INTERVAL = 60.0
#: Seconds between two lookups of the topics while one is missing: as often as the consumers
#: refresh their metadata, so the line saying a topic exists comes when they notice it too.
CHECK_INTERVAL = METADATA_REFRESH_MS / 1000
#: How long one topic's lookup waits for the brokers (an outage is not this watch's to tell).
LOOKUP_TIMEOUT = 5.0
#: What creates the topics (from the same settings as the service's).
CREATE_COMMAND = "digest-stream topics create"


def _named(topics: Mapping[str, str]) -> str:
    """'Kafka topic T (SETTING)', or 'Kafka topics T (SETTING), U (SETTING)'."""
    named = ", ".join(f"{topic} ({setting})" for topic, setting in topics.items())
    return f"Kafka topic{'' if len(topics) == 1 else 's'} {named}"


def missing_line(topics: Mapping[str, str], waited: float = 0.0) -> str:
    """The line naming missing topics (topic -> the setting naming it) and what creates them;
    ``waited``: for how long they have been missing, said by the reminders."""
    one = len(topics) == 1
    line = (
        f"{_named(topics)} {'does' if one else 'do'} not exist: create {'it' if one else 'them'} "
        f"with `{CREATE_COMMAND}` (run with the same settings); the service waits for "
        f"{'it' if one else 'them'} and needs no restart"
    )
    return f"{line} (missing for {waited:.0f}s)" if waited >= 1 else line


def missing_problem(topics: Mapping[str, str]) -> str:
    """Readiness's problem for missing topics: which, and what creates them."""
    verb = "does" if len(topics) == 1 else "do"
    return f"{_named(topics)} {verb} not exist (`{CREATE_COMMAND}`)"


class MissingTopics:
    """What the log says about the service's missing topics: newly missing ones at once, the
    same ones again every ``remind`` seconds while they stay missing, those that appear once.
    """

    def __init__(
        self,
        settings_of: Mapping[str, str],
        *,
        remind: float = REMIND_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings_of = dict(settings_of)  # topic -> the setting that names it
        self._remind = remind
        self._clock = clock
        self._missing: frozenset[str] = frozenset()
        self._since = 0.0  # when the topics went missing (the first of them)
        self._said = 0.0  # when the last line about them was logged
        self._lock = threading.Lock()  # readiness reads `missing` from the HTTP thread

    @property
    def missing(self) -> dict[str, str]:
        """The topics the latest lookup found missing, with the setting naming each."""
        with self._lock:
            return self._of(self._missing)

    def update(self, missing: Iterable[str]) -> None:
        """Take one lookup's missing topics: log what changed, or remind when it is time."""
        now = self._clock()
        found = frozenset(missing) & self._settings_of.keys()
        with self._lock:
            before, self._missing = self._missing, found
        appeared = self._of(before - found)
        if appeared:
            verb, them = ("exists", "it") if len(appeared) == 1 else ("exist", "them")
            log.info("%s %s now; the service uses %s", _named(appeared), verb, them)
        if not found:
            return
        if not before:
            self._since = now
        elif not found - before and now - self._said < self._remind:
            return
        self._said = now
        log.warning("%s", missing_line(self._of(found), now - self._since))

    def _of(self, topics: frozenset[str]) -> dict[str, str]:
        # In the service's order of its topics (events, schedule, DLQ, output).
        return {topic: setting for topic, setting in self._settings_of.items() if topic in topics}


def lookup(admin: AdminClient, topics: Iterable[str]) -> set[str] | None:
    """Which of ``topics`` do not exist; None when the brokers did not answer."""
    missing = set()
    for topic in topics:
        try:
            metadata = admin.list_topics(topic, timeout=LOOKUP_TIMEOUT).topics.get(topic)
        except KafkaException:
            return None
        if metadata is None or (
            metadata.error is not None and metadata.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        ):
            missing.add(topic)
    return missing


class TopicWatch:
    """A thread that looks the service's topics up until ``stop`` is set, telling ``missing``
    what it found: every ``check`` seconds while one is missing, every REMIND_INTERVAL else."""

    def __init__(
        self,
        settings: Settings,
        topics: Mapping[str, str],
        stop: threading.Event,
        *,
        check: float = CHECK_INTERVAL,
    ) -> None:
        self._settings = settings
        self._stop = stop
        self._check = check
        self.missing = MissingTopics(topics)
        self._topics = list(topics)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start looking (the first lookup at once)."""
        self._thread = threading.Thread(target=self._run, name="digest-topics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        name_os_thread()
        admin = AdminClient(admin_config(self._settings))
        wait = self._check
        while True:
            found = lookup(admin, self._topics)
            if found is not None:
                self.missing.update(found)
                # All there: only a deletion is left to notice, and once a minute will do.
                wait = self._check if found else max(self._check, REMIND_INTERVAL)
            if self._stop.wait(wait):
                return
