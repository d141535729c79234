/*
 * TJ_API marks the core's public functions: the only names its shared library
 * exports. The core is built with -fvisibility=hidden, so every other
 * non-static function (the tj__ internals shared between its source files)
 * stays inside the library.
 */
#ifndef TILEJIT_EXPORT_H_
#define TILEJIT_EXPORT_H_

#if defined(_WIN32)
#define TJ_API __declspec(dllexport)
#elif defined(__GNUC__)
#define TJ_API __attribute__((visibility("default")))
#else
#define TJ_API
#endif

#endif /* TILEJIT_EXPORT_H_ */
