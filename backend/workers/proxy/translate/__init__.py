"""Translation between the client APIs (Ollama, OpenAI, Anthropic Messages) and an engine's.

Every engine speaks the OpenAI API; a request in an API its engine does not speak is turned
into an OpenAI one (``ollama_api.py``, ``anthropic_api.py``) and its answer turned back, chunk
by chunk for a stream. ``plan.py`` decides, per attempt, whether a request passes through
untouched (the engine speaks the client's API) or is translated.
"""
