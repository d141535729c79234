"""The user's vocabulary: the signature language ``T``, ``Program``, element types and
raw pointers. Nothing here compiles or runs a kernel."""
