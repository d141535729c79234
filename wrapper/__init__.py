"""The Cython wrapper sources, shipped so the wrapper can be compiled at run time."""
