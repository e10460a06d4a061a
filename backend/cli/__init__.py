"""The ``pair`` command line."""
