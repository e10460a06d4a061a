"""Discovery: mDNS advertisement and browsing, manual nodes, the directory of nodes."""
