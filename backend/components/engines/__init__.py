"""The engine manager: manifest-driven Ollama, LM Studio and llama-server on this node."""
