"""The front doors: each door's aiohttp application, the gate that decides who may use it over
plaintext, the federated model lists and the answers the door makes itself."""
