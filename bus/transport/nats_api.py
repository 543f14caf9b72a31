"""The nats-py names a shrinking list of modules above the transport still use.

The façade's connection plumbing (the client, its JetStream context, the
errors it reacts to) and the in-process test broker, which stands in for the
nats-py client and so speaks its types. Components below the façade name the
transport's own types instead (:mod:`bus.transport.port`, :mod:`bus.transport.kv`,
:mod:`bus.transport.streams`); tests/test_architecture.py lists who may import
this module and fails when the list grows.
"""

import nats
import nats.errors as nats_errors
import nats.js.errors as js_errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

connect = nats.connect

__all__ = [
    "Client",
    "JetStreamContext",
    "KeyValue",
    "Msg",
    "connect",
    "js_errors",
    "nats_errors",
]
