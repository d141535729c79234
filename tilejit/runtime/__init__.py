"""The runtime: kernel objects (``JITKernel``, ``@jit``), ``compile``/``load``, the one
binding every execution backend hands calls to, and the framework adapters it asks."""
