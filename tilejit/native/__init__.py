"""The C core as Python sees it: its ABI constants, its structures (ctypes mirrors), its
loaded library, and the build tools that make it. The lowest wing: it imports no other."""
