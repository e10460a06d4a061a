"""Controllers: the only GUI code that calls broker RPCs; they feed models and run commands."""
