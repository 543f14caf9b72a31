"""Field types the config files share: a non-empty string, a name that is a subject token, seconds.

Each feature declares its files' entries as ``msgspec`` types in its own ``config_schema.py``; loaders
:func:`bus._core.schema.convert` a parsed document to them, so every problem names the file, the entry
and the field.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
#: A name that is also a NATS subject token.
Name = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]+$")]
#: One string or a list of them (``match: shell`` or ``match: [shell, write_file]``).
Strings = NonEmpty | list[NonEmpty]
Seconds = Annotated[float, msgspec.Meta(ge=0)]

#: Longest timeout a hook or plugin entry may give (a day): anything longer is a typo in units.
MAX_TIMEOUT_MS = 24 * 3600 * 1000
TimeoutMs = Annotated[int, msgspec.Meta(ge=1, le=MAX_TIMEOUT_MS)]
