"""The nats-py names the rest of hookbus may use, re-exported from the one layer that imports nats-py.

Exception types to catch, message and KV types to annotate, JetStream
configs to build: everything above the transport names them from here, so a
test can check that nothing else imports nats-py (tests/test_architecture.py).
"""

import nats
import nats.errors as nats_errors
import nats.js.errors as js_errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
)
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

connect = nats.connect

__all__ = [
    "AckPolicy",
    "Client",
    "ConsumerConfig",
    "DeliverPolicy",
    "JetStreamContext",
    "KeyValue",
    "Msg",
    "NatsSubscription",
    "RetentionPolicy",
    "StorageType",
    "StreamConfig",
    "StreamInfo",
    "connect",
    "js_errors",
    "nats_errors",
]
