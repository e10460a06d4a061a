"""Routing: which nodes may serve a request, in what order, with which reservations, and failing
over to the next one before the commit (the decisions are pure functions in ``plan`` and
``candidates``; ``dispatch`` does the I/O)."""
