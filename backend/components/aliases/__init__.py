"""Model aliases: user-chosen names that reach a model at this computer's front doors."""
