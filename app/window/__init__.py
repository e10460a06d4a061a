"""The main window, its pages and widgets. Views call controllers, never RPC."""
