"""The proxy worker: serves the front doors on listening sockets the broker hands over.

Its routing policies (``routing``, ``retry``, ``naming``, ``gate``, ``wire``) are plain
functions and small classes without I/O.
"""
