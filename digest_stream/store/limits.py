"""The limits and codes the store's Python side and its Lua library share, defined once.

``store/redis/library.py`` writes each of them as a ``local NAME = value`` line at the top of the
assembled library, so the Lua guards and the Python checks cannot drift apart.
"""

from __future__ import annotations

from digest_stream.vocabulary import DigestReason

#: Timeline names and record ids end up in key names and hash fields; anything longer is
#: almost certainly a producer bug.
MAX_NAME_BYTES = 1024
#: Offsets travel to Lua as doubles, exact up to 2**53.
MAX_OFFSET = 2**53
#: A Kafka topic id is a UUID in base64 (22 characters); room for other spellings.
MAX_TOPIC_ID_BYTES = 64
#: The longest TTL (seconds, ten years) the store accepts. Beyond ~1e14 ms Lua would hand
#: PEXPIRE an exponent-form number ("1e+17"), which Redis refuses; no digest waits that long.
MAX_TTL = 315_360_000
#: The most timelines one schedule or maintenance call may move (a caller's largest slice).
MAX_SLICE = 100_000
#: flush_at never makes a timeline due sooner than this many seconds after its last delivery:
#: a burst of events on a timeline with a small ``flush_at`` cannot turn into a digest storm.
#: (An explicit flush control bypasses it: someone asked for that digest.)
FLUSH_AT_FLOOR = 1.0
#: A timeline whose digest closed with nothing pending cools down in no schedule set: its meta
#: alone says when the cool-down ends (its last delivery plus minimum_delay, by the caller's
#: clock), and expires this many seconds after that by Redis's clock. The margin keeps the meta
#: through a caller's clock behind Redis's (the service warns past 1 s) and is what a quiet
#: timeline's leftover costs in memory; past it the timeline is absent, as it would be anyway.
COOLING_MARGIN = 60.0
#: Seconds the leading edge's index keeps one generation before maintenance starts the next
#: (store/redis/lua/batches.lua): the previous one goes once every batch it names is gone.
INDEX_ROTATE_AFTER = 60.0
#: Upper bound of RedisStore's ``inline_records``: keeps the Lua's unpack() well inside its
#: stack and an inline container's rewrites small.
INLINE_MAX_RECORDS = 128
#: A digest id: this many lowercase hex characters (a uuid4's hex), minted by the caller.
DIGEST_ID_LENGTH = 32
#: An add's leading-edge nonce: this many lowercase hex characters; each digest the add opens
#: has the nonce and its number in the call (the rest of DIGEST_ID_LENGTH, hex) as its id.
OPEN_NONCE_LENGTH = 24
#: How long Redis keeps a partition's last ``ds_schedule`` reply for a re-send of that call
#: (same nonce; one of this length too): a client's retry sends a call whose reply it lost
#: again, and the re-run must name what the first run moved. Past what redis-py's default
#: retry of one call can take (10 retries, each up to the 10 s socket timeout, a 2 s connect
#: and a backoff of at most 1 s: about 130 s), short of maintenance (~330 s). The clients
#: the service builds today do not retry (store/redis/client.py): their lost reply is an
#: outage to the scheduler, which re-announces every READY timeline once Redis answers.
SCHEDULE_REPLY_TTL = 180.0
#: Why a timeline is due (the ``reason`` of its next digest, ``base.REASONS``), and the one
#: letter a timeline's meta in Redis records for it: the store's members of DigestReason.
CAUSES = {reason.value: reason.letter for reason in DigestReason if reason.letter is not None}
