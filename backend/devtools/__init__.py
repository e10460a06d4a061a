"""Development code beside the product: engine emulators (``emulators/``), ``pair demo``, the
supervision test worker, a generated GGUF model and a locally built llama-server.

The product (``backend.core``, ``backend.components``, ``backend.workers``, the broker) never
imports this package; a test walks the imports. The CLI imports it lazily, only for ``pair demo``,
``pair emulate`` and the hidden ``pair node --test-worker``. The heavy dependencies (numpy,
gguf) are dev extras, imported only inside the functions that need them.
"""
