"""KV buckets mirrored into a leaf node's own JetStream domain: kernels on the leaf watch a local copy.

A leaf node with JetStream in a domain of its own answers ``$JS.API`` itself,
so a process connected there binds the leaf's streams. :func:`mirror_buckets`
makes each hookbus bucket there a mirror of the hub's (same stream name, so
nats-py's KV API binds it unchanged); watches, gets and the stored-keys count
read the copy. A mirror takes no writes, and nats-server does not carry
``$KV.>`` over a link between two domains, so a write to a mirrored bucket goes
to the origin through the hub domain's API prefix, as ADR-8 lays out for
mirrored buckets: ``$JS.<hub>.API.$KV.<bucket>.<key>`` (:func:`write_prefix`).

``HOOKBUS_KV_DOMAIN`` names the domain that holds the buckets (the hub's).
Set on a leaf's processes, a bucket with no mirror there (the records' buckets,
say) is read and written at the hub through that domain's API prefix,
never created on the leaf as a second bucket of the same name that nobody on
the hub would see (:mod:`bus._transport.home` decides where, for every bucket and stream).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import nats.errors as nats_errors
import nats.js.errors as js_errors
from nats.js import api

from bus._core.errors import RegistryError
from bus._core.subjects import (
    GUARDS_BUCKET,
    MODULES_BUCKET,
    PRESENCE_BUCKET,
    RULES_BUCKET,
    TRUST_BUCKET,
    js_domain_api,
    kv_bucket_of_stream,
    kv_key_subject_via,
    kv_stream,
)

#: The environment variable naming the JetStream domain that holds hookbus's buckets (the hub's).
DOMAIN_ENV = "HOOKBUS_KV_DOMAIN"

#: What a kernel watches (the registry, the trust store with its switches, the guard records, the rules),
#: and the presence bucket every process binds: what a leaf mirrors by default.
MIRRORED = (MODULES_BUCKET, TRUST_BUCKET, GUARDS_BUCKET, RULES_BUCKET, PRESENCE_BUCKET)

_FAILURES = (nats_errors.Error, js_errors.Error, TimeoutError)


def kv_domain(environ: Mapping[str, str] | None = None) -> str | None:
    """The domain holding the buckets, from ``HOOKBUS_KV_DOMAIN``; None when unset (one domain)."""
    value = (os.environ if environ is None else environ).get(DOMAIN_ENV, "").strip()
    return value or None


def write_prefix(config: Any) -> str | None:
    """Where puts to a bucket whose stream has ``config`` go: None for a bucket of its own (nats-py's
    ``$KV.<bucket>.``), the origin's subjects through its domain's API prefix for a mirror of another
    domain's bucket."""
    mirror = getattr(config, "mirror", None)
    external = getattr(mirror, "external", None) if mirror is not None else None
    if mirror is None or external is None or not external.api:
        return None
    return kv_key_subject_via(external.api, kv_bucket_of_stream(mirror.name))


def mirror_config(origin: Any, domain: str) -> api.StreamConfig:
    """The stream of a local mirror of the bucket whose stream config is ``origin``, in ``domain``."""
    return api.StreamConfig(
        name=origin.name,
        mirror=api.StreamSource(name=origin.name, external=api.ExternalStream(api=js_domain_api(domain))),
        retention=api.RetentionPolicy.LIMITS,
        storage=api.StorageType.FILE,
        max_age=origin.max_age,
        max_msgs_per_subject=origin.max_msgs_per_subject or 1,
        max_msgs=-1,
        max_bytes=-1,
        max_msg_size=-1,
        max_consumers=-1,
        discard=api.DiscardPolicy.NEW,
        num_replicas=1,
        allow_rollup_hdrs=False,
        deny_delete=True,
        deny_purge=True,
    )


async def local_domain(nc: Any) -> str | None:
    """The JetStream domain of the server ``nc`` is connected to (None when it has none)."""
    try:
        info = await nc.jetstream().account_info()
    except _FAILURES:
        return None
    return getattr(info, "domain", None) or None


def origin_prefix(domain: str, name: str) -> str:
    """Where writes to bucket ``name`` of ``domain`` go from a server of another domain."""
    return kv_key_subject_via(js_domain_api(domain), name)


async def mirror_buckets(nc: Any, source: str, names: Sequence[str] = MIRRORED) -> list[str]:
    """Make each bucket of ``names`` on ``nc``'s server a mirror of ``source`` domain's; returns what it made.

    A bucket already mirrored is left alone; one that exists here as a bucket of
    its own is an error (its keys would be lost to, or hidden by, the hub's).
    """
    if await local_domain(nc) == source:
        raise RegistryError(f"this server is in domain {source!r} itself: mirror from a leaf node's server")
    here, there = nc.jetstream(), nc.jetstream(domain=source)
    made: list[str] = []
    for name in names:
        stream = kv_stream(name)
        try:
            origin = (await there.stream_info(stream)).config
        except js_errors.NotFoundError:
            raise RegistryError(f"domain {source!r} has no {name} bucket: start 'hookbus up' on the hub") from None
        except _FAILURES as exc:
            raise RegistryError(f"could not read {name} in domain {source!r} ({exc!r})") from None
        if await _already_mirrored(here, stream, name):
            continue
        try:
            await here.add_stream(mirror_config(origin, source))
        except _FAILURES as exc:
            raise RegistryError(f"could not mirror {name} here ({exc!r})") from None
        made.append(name)
    return made


async def _already_mirrored(js: Any, stream: str, name: str) -> bool:
    try:
        config = (await js.stream_info(stream)).config
    except js_errors.NotFoundError:
        return False
    if write_prefix(config) is None:
        raise RegistryError(f"{name} exists on this server as a bucket of its own, not a mirror: remove it first")
    return True
