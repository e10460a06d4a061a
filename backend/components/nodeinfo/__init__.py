"""Node info: hardware telemetry, the node API listener and ``GET /v1/node-info``."""
