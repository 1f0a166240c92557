"""The delivery role, in pieces with one job each.

- ``partitions``: the assigned schedule partitions, their positions and epochs;
- ``overlap``: the next batch's opens and this batch's closes on a helper thread;
- ``retries``: a batch published (with the one publisher, roles.publish) until acknowledged,
  retried or dead-lettered;
- ``loop``: the thin ``Delivery`` role that wires them to the runner and the store.
"""

from digest_stream.roles.delivery.loop import Delivery

__all__ = ["Delivery"]
