"""Jobs: every inference request's lifecycle, kept durably and shown live."""
