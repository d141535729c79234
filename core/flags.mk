# The flags every build of the core's sources compiles them with: core/Makefile
# includes this file, build_tools/core_build.py reads it (NAME := flags, one
# definition per line). Each build adds its own optimisation and checks on top:
# the cached library -O2 -DNDEBUG -fPIC, the C tests -O1 -g -Wall -Wextra -Werror
# (and the sanitizers).

# The language and threads.
CORE_LANG_FLAGS := -std=gnu11 -pthread
# Only the functions the headers mark TJ_API are exported (tilejit/export.h):
# the tj__ internals shared between the files stay inside. torch.c throws C++
# exceptions through the core's frames (how torch's C ABI fails an operator),
# which needs their unwind tables on every architecture.
CORE_LIB_FLAGS := -fvisibility=hidden -fexceptions
