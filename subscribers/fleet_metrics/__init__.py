"""Fleet metrics derived from what crosses the bus: events, journal entries, processes' counters reports."""
