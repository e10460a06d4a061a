"""The GUI's copies of the broker's numbered streams: one store per stream, shared by the
controllers that show it (built once, in ``app/application.py``)."""
