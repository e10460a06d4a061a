"""The broker's components, one package each."""
