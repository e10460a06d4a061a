"""LAN API keys: the secrets that let other computers use the front doors (``lan_access``)."""
