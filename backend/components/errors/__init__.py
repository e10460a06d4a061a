"""The errors registry: sticky, keyed problems that the GUI shows as banners."""
