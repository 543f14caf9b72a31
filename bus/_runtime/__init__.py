"""The runtime: what a running process needs beside the protocol (eager starts, task sets, file
watching and locks, private files, rate-limited logs, spans, counters, config files, quantities,
visible text). It imports nothing above :mod:`bus._core`."""
