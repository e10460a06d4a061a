"""The proxy worker's HTTP/1.1 server: its listeners' connections, parsed by httptools.

aiohttp's applications, requests and responses serve every route as before; only the
connection protocol is PAIR's own (``connection.py``), because aiohttp's (``RequestHandler``)
cost about as much CPU per request as everything else a request does in the worker
(bench/README.md, "Front door", "PAIR's own connections").
"""
