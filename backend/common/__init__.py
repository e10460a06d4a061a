"""Small pieces shared by the backend and the app: owned tasks, atomic file writes, the
command that runs PAIR itself, and the version and build commit.

No Qt, no network I/O and no other backend package but ``backend.protocol``, so that both sides
may import it (a test walks the imports).
"""
