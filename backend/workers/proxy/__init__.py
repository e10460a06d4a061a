"""The proxy worker: serves the front doors on listening sockets the broker hands over."""
