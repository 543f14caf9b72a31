"""The journal sink: stores journal entries in SQLite and JSONL."""
