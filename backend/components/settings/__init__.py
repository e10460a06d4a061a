"""Node settings: a typed schema, validation, atomic 0600 persistence, a frozen typed view, and
which log level holds (the command line, the setting or an explicit choice)."""
