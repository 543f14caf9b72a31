"""Creating a bucket's stream on first use, with the errors a user can act on: one rule for every bucket kind."""

from __future__ import annotations

from typing import Any, ClassVar

import nats.errors as nats_errors
import nats.js.errors as js_errors
from nats.js import api

from bus._core.errors import RegistryError
from bus._core.subjects import kv_key_subject, kv_stream
from bus._transport.connection import jetstream_replicas
from bus._transport.home import home_of

_FAILURES = (nats_errors.Error, js_errors.Error, TimeoutError)


async def add_bucket_stream(js: Any, name: str, config: api.StreamConfig) -> None:
    """Create the stream of bucket ``name`` if it is missing; RegistryError if this user may not."""
    try:
        await js.add_stream(config)
    except js_errors.BadRequestError:
        pass  # it exists (created by someone else meanwhile, maybe with another max age)
    except (nats_errors.TimeoutError, TimeoutError):  # what a create the server denied looks like from here
        raise RegistryError(
            f"the {name} bucket does not exist and this user may not create it: "
            "start 'hookbus up' (the bus role creates it) or run a hookbus command as the operator"
        ) from None
    except (js_errors.ServiceUnavailableError, nats_errors.NoRespondersError) as exc:
        raise RegistryError(f"JetStream is not available on this server ({type(exc).__name__})") from None
    except _FAILURES as exc:
        raise RegistryError(f"bucket {name}: create failed ({exc!r})") from None


class StreamBucket:
    """A bucket that is a stream of its own under KV-style subjects, on the home JetStream (the hub's from a leaf).

    A kind of bucket says its stream's configuration (:meth:`config`) and how
    long its JetStream calls wait (``_timeout``).
    """

    _timeout: ClassVar[float]

    def __init__(self, name: str, nc: Any, max_age_s: float) -> None:
        self.name = name
        self.max_age_s = max_age_s
        self._nc = nc
        self._stream = kv_stream(name)
        self._prefix = kv_key_subject(name)

    def config(self, replicas: int) -> api.StreamConfig:
        """The bucket's stream with ``replicas`` copies."""
        raise NotImplementedError

    async def _js(self) -> Any:
        """The JetStream context of the domain holding the bucket (the hub's, from a leaf node)."""
        return (await home_of(self._nc)).jetstream(self._nc, timeout=self._timeout)

    async def ensure(self) -> None:
        """Create the bucket's stream if it is missing; RegistryError if this user may not."""
        await add_bucket_stream(await self._js(), self.name, self.config(jetstream_replicas(self._nc)))
