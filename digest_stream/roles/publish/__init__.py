"""Publishing a digest: the one component both delivery and the ingest's leading edge use.

- ``build``: one opened digest -> the messages that publish it (pure; ``compose`` for the
  policy's fields, ``parts`` for sizing them for the broker);
- ``produce``: a digest on its way out (``Pending``) and producing its parts;
- ``report``: metrics, logs and hooks of each digest;
- ``publisher``: ``DigestPublisher``, which wires them to one producer.
"""

from digest_stream.roles.publish.produce import Pending
from digest_stream.roles.publish.publisher import DigestPublisher, close_targets

__all__ = ["DigestPublisher", "Pending", "close_targets"]
