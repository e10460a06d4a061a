"""Node settings: a typed schema, validation, atomic 0600 persistence."""
