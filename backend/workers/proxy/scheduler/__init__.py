"""This node's engine schedulers: capacity, turns, exclusive operations, slot choice and
affinity (pure rules), and the engine I/O they ask for."""
