"""The delivery role, in pieces with one job each.

- ``build``: one opened digest -> the messages that publish it (pure; ``compose`` for the
  policy's fields, ``parts`` for sizing them for the broker);
- ``partitions``: the assigned schedule partitions, their positions and epochs;
- ``overlap``: the next batch's opens and this batch's closes on a helper thread;
- ``publish``: producing the parts until acknowledged, retried or dead-lettered;
- ``report``: metrics, logs and hooks of each digest;
- ``loop``: the thin ``Delivery`` role that wires them to the runner and the store.
"""

from digest_stream.roles.delivery.loop import Delivery

__all__ = ["Delivery"]
