"""The shell-hook workers' queue group."""

from __future__ import annotations

#: The shell-hook workers' queue group (unless told otherwise: the namespace of their per-key groups, see
#: bus._core.subjects.key_queue).
SHELL_QUEUE = "hookbus-shell"
