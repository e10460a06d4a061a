"""Protocol emulators standing in for real engines (Ollama, LM Studio and its ``lms`` CLI).

Neither engine can be installed on the project's machines, so tests, demos and developers run
these instead. They follow each engine's wire behaviour as the engines' own documentation and
source give it: paths, fields, NDJSON vs SSE framing, error bodies and statuses, with a timing
model (load delay, per-token delay), parallel slots with FIFO queueing, cancellation on client
disconnect, and a fake-only introspection endpoint ``GET /_emulator/state``.
"""
