"""Finding GGUF models on Hugging Face: search repositories by name, list a repository's model
files with their sizes and quantizations, and suggest the one that fits a computer's memory.
Pulling a chosen file is llama.cpp's own pull by URL (``engine:action`` ``pull_model``)."""
