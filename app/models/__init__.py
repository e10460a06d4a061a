"""Qt item models fed by broker snapshots and pushes; views read them, never the wire."""
