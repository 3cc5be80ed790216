"""A worker process: listeners, the connection loop, op handlers, and the router they call."""
