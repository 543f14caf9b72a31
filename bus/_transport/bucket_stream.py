"""Creating a bucket's stream on first use, with the errors a user can act on: one rule for every bucket kind."""

from __future__ import annotations

from typing import Any

import nats.errors as nats_errors
import nats.js.errors as js_errors
from nats.js import api

from bus._core.errors import RegistryError

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
