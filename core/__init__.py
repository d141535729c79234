"""The C core sources, shipped so the core can be compiled at run time."""
