"""The ingest role, in pieces with one job each.

- ``check``: one message -> a record, a rejection (dead letter) or too old (pure);
- ``fence``: where a partition starts and what a fence found behind means (pure);
- ``ledger``: per-partition ownership, expected fences, positions and commits;
- ``worker``: the store worker thread that overlaps a batch's store call with the next batch;
- ``loop``: the thin ``Ingest`` role that wires them to its runner, the store and the
  scheduler (``ingest_role`` builds the three).
"""

from digest_stream.roles.ingest.loop import Ingest, ingest_role

__all__ = ["Ingest", "ingest_role"]
