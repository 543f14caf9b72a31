"""The module name record runners serve under."""

from __future__ import annotations

#: The module name record runners serve under (``hookbus runner --module`` changes it).
RECORDS_MODULE = "records"
