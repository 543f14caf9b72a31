"""Agent turns: requests for a turn and the server that runs them."""
