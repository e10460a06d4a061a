"""Developer tools for tests and the demo: a generated GGUF model and a locally built llama-server.

Nothing here runs in a user's broker unless asked; the heavy dependencies (numpy, gguf) are dev
extras and are imported only inside the functions that need them.
"""
