"""The GUI's side of the broker: spawning or attaching, supervision and the RPC session."""
