/*
 * The ABI numbers of an installed dlpack.h (torch's), for test_abi.c to
 * compare with the vendored one. This translation unit must include the
 * reference header only: the two declare the same names. The Makefile builds
 * it only when it found one, passing its path as TJT_REFERENCE_DLPACK_H.
 */
#ifndef TJT_REFERENCE_DLPACK_H
#error "build with -DTJT_REFERENCE_DLPACK_H='\"/path/to/dlpack.h\"'"
#endif

#include TJT_REFERENCE_DLPACK_H

#define TJT_ABI_MAJOR DLPACK_MAJOR_VERSION
#include "abi_items.h"

static const tjt_abi_item reference_items[] = {TJT_ABI_ITEMS(TJT_ABI_ITEM)};

const tjt_abi_item *tjt_reference_abi(int *count) {
  *count = (int)(sizeof(reference_items) / sizeof(reference_items[0]));
  return reference_items;
}

const char *tjt_reference_abi_path(void) { return TJT_REFERENCE_DLPACK_H; }
