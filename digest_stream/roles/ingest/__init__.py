"""The ingest role, one room per job, in the order a batch goes through them.

- ``read``: the ``Ingest`` role takes batches from Kafka and runs the rooms below; where each
  partition starts (``topic``: the events topic as the broker describes it);
- ``check``: one message -> a record, a rejection (dead letter) or too old; a batch by partition;
- ``apply``: each partition batch's store add, fenced, on the store worker, and its booking
  (``fence``: the fence's rules, pure, and what a decision does);
- ``lead``: the leading edge: publishes the first digests the add opened and closes them;
- ``commit``: the ledger of offsets, the dead letters a commit waits for, the commit.
"""

from digest_stream.roles.ingest.read import Ingest, ingest_role

__all__ = ["Ingest", "ingest_role"]
