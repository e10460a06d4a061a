"""The worker's channels to its broker: job events, custody of waiting requests, door hand-over."""
