"""Handler records: handlers stored on the bus as declarations plus Python source (docs/records.md)."""
