"""The reference agent: a turn runner on an OpenAI-compatible chat API, and hook turns."""
