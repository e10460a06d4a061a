"""One model spread over several members: planning the split and carrying llama.cpp's RPC."""
