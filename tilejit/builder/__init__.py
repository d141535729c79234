"""Building: a ``Program`` lowered to the core's signature, compiled by the C or CUDA
compiler driver into the artifact cache, and exported for other processes."""
