"""The front doors, broker side: the listening sockets, the proxy worker and its routing table."""
