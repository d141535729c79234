"""ctypes mirrors of the core's public C structures (core/include/tilejit/*.h) that
Python uses: tilejit's bindings and the tests' fakes, nothing more.

Each class names its C type in ``_c_name_`` and lists every field of it, in order; a test
(tests/test_abi_mirrors.py) compiles the headers and checks each field's name, offset and
size and the struct's size against the C compiler's, and that each class is used.
"""

from __future__ import annotations

from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_ssize_t,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
)

from . import abi

# ---- dlpack/dlpack.h ----------------------------------------------------------------


class DLDevice(Structure):
    _c_name_ = "DLDevice"
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _c_name_ = "DLDataType"
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _c_name_ = "DLTensor"
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLPackVersion(Structure):
    _c_name_ = "DLPackVersion"
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensor(Structure):
    _c_name_ = "DLManagedTensor"
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


class DLManagedTensorVersioned(Structure):
    _c_name_ = "DLManagedTensorVersioned"
    _fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", c_void_p),
                ("flags", c_uint64), ("dl_tensor", DLTensor)]


# ---- tilejit/core.h, producer.h, host.h ---------------------------------------------


class TjAbiArg(Structure):
    _c_name_ = "tj_abi_arg"
    _fields_ = [("source", c_int32), ("index", c_int32), ("dtype", DLDataType)]


_RANK = abi.TJ_MAX_TENSORMAP_RANK


class TjTensorMap(Structure):
    _c_name_ = "tj_tensormap"
    _fields_ = [("name", c_char_p), ("param", c_int32), ("data_type", c_int32),
                ("rank", c_int32), ("dims", c_int32 * _RANK), ("strides", c_int32 * (_RANK - 1)),
                ("box", c_int32 * _RANK), ("element_strides", c_int32 * _RANK),
                ("interleave", c_int32), ("swizzle", c_int32), ("l2_promotion", c_int32),
                ("oob_fill", c_int32), ("im2col", c_int32), ("lower_corner", c_int32 * (_RANK - 2)),
                ("upper_corner", c_int32 * (_RANK - 2)), ("channels_per_pixel", c_int32),
                ("pixels_per_column", c_int32)]


class TjSymbolInfo(Structure):
    _c_name_ = "tj_symbol_info"
    _fields_ = [("name", c_char_p), ("divisibility", c_int64), ("dtype", DLDataType)]


class TjExprInfo(Structure):
    _c_name_ = "tj_expr_info"
    _fields_ = [("code", POINTER(c_int64)), ("n", c_int32), ("text", c_char_p)]


class TjParamInfo(Structure):
    _c_name_ = "tj_param_info"
    _fields_ = [("kind", c_int32), ("name", c_char_p), ("dtype", DLDataType), ("ndim", c_int32),
                ("shape", POINTER(c_int32)), ("strides", POINTER(c_int32)), ("align", c_int64),
                ("flags", c_uint32), ("symbol", c_int32)]


class TjLaunchInfo(Structure):
    _c_name_ = "tj_launch_info"
    _fields_ = [("symbol", c_char_p), ("grid", c_int32 * 3), ("block", c_int32 * 3),
                ("shared_mem", c_int32), ("cluster", POINTER(c_int32)), ("flags", c_uint32),
                ("nargs", c_int32), ("args", POINTER(TjAbiArg))]


class TjExportArg(Structure):
    _c_name_ = "tj_export_arg"
    _fields_ = [("name", c_char_p), ("source", c_int32), ("index", c_int32), ("dtype", c_char_p),
                ("pointer", c_int32), ("is_const", c_int32), ("param", c_int32)]


class TjExportFunction(Structure):
    _c_name_ = "tj_export_function"
    _fields_ = [("name", c_char_p), ("prototype", c_char_p), ("nargs", c_int32),
                ("args", POINTER(TjExportArg))]


class TjExportLoad(Structure):
    _c_name_ = "tj_export_load"
    _fields_ = [("image", c_char_p), ("entry", c_char_p), ("library", c_char_p),
                ("symbol", c_char_p)]


class TjHost(Structure):
    _c_name_ = "tj_host"
    _fields_ = [(name, c_void_p) for name in (
        "capsule_is_valid", "capsule_pointer", "capsule_set_name", "object_type", "release")]
    _fields_ += [("type_offset", c_ssize_t)]
    _fields_ += [(name, c_void_p) for name in ("sequence_size", "sequence_item", "tuple_new", "tuple_set", "retain",
        "list_new", "list_set", "int64_of", "uint64_of", "double_of", "index_of", "truth",
        "int_new", "string_new", "string_compare", "attribute", "call", "error_pending",
        "error_clear", "error_fetch", "error_normalize", "error_set", "error_set_object",
        "exception_set_cause", "error_restore", "dict_item", "unlock", "lock", "interpreter", "thread_head", "thread_next",
        "none", "true_object", "int_type", "float_type", "bool_type")]
    _fields_ += [("exceptions", c_void_p * abi.TJ_HOST_NUM_STATUS)]
    _fields_ += [(name, c_void_p) for name in (
        "describe", "dlpack_capsule", "allocate", "framework_stream", "stream_handle",
        "lazy_view", "producer_error", "claims")]
    _fields_ += [("float_value_offset", c_ssize_t)]
    _fields_ += [("int_layout", c_ssize_t), ("int_head_offset", c_ssize_t),
                 ("int_digit_offset", c_ssize_t)]


class TjViewBits(Structure):
    _c_name_ = "tj_view_bits"
    _fields_ = [("block_offset", c_int64), ("word_offset", c_int64), ("conjugate", c_uint64),
                ("negative", c_uint64)]
class TjClaim(Structure):
    _c_name_ = "tj_claim"
    _fields_ = [("always", c_int32), ("offset", c_int32), ("requires_grad", c_void_p),
                ("grad_enabled", c_void_p), ("ask", c_void_p), ("active", c_void_p),
                ("context", c_void_p), ("meta_offset", c_int32)]


class TjHostClaimMode(Structure):
    _c_name_ = "tj_host_claim_mode"
    _fields_ = [("host", c_void_p), ("scope", c_void_p), ("key", c_void_p), ("idle", c_void_p)]


class TjProducer(Structure):
    _c_name_ = "tj_producer"
    _fields_ = [("import_", c_void_p), ("allocate", c_void_p), ("current_stream", c_void_p),
                ("api", c_void_p), ("type", c_void_p), ("context", c_void_p),
                ("host", c_void_p), ("view", c_void_p), ("view_bits", c_void_p),
                ("claim", c_void_p), ("read", c_void_p), ("read_context", c_void_p),
                ("make", c_void_p)]


class TjHostType(Structure):
    _c_name_ = "tj_host_type"
    _fields_ = [("kind", c_int32), ("producer", c_void_p), ("name", c_char_p)]


class TjHostPlan(Structure):
    _c_name_ = "tj_host_plan"
    _fields_ = [("kernel", c_void_p), ("host", c_void_p), ("exchange", c_int32),
                ("out_order", POINTER(c_int32)), ("fallback", c_void_p), ("name", c_void_p),
                ("kernel_object", c_void_p), ("keywords", c_void_p), ("claimed", c_void_p),
                ("unclaimed", c_int32), ("stream_is_input", c_int32),
                ("claim_at_once", c_int32), ("record", c_void_p), ("record_types", c_void_p * 2),
                ("record_wrapped", c_void_p), ("record_off", c_void_p * 2),
                ("record_mode", c_void_p), ("record_plain", c_void_p),
                ("record_plain_context", c_void_p)]


# ---- tilejit/xla.h: the part of XLA's FFI C API the core's handler reads ------------------


class TjXlaBuffer(Structure):
    _c_name_ = "tj_xla_buffer"
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("dtype", c_int32),
                ("data", c_void_p), ("rank", c_int64), ("dims", POINTER(c_int64))]


class TjXlaByteSpan(Structure):
    _c_name_ = "tj_xla_byte_span"
    _fields_ = [("ptr", c_char_p), ("len", c_size_t)]


class TjXlaScalar(Structure):
    _c_name_ = "tj_xla_scalar"
    _fields_ = [("dtype", c_int32), ("value", c_void_p)]


class TjXlaList(Structure):
    _c_name_ = "tj_xla_list"
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("size", c_int64),
                ("types", POINTER(c_int32)), ("items", POINTER(c_void_p))]


class TjXlaAttrs(Structure):
    _c_name_ = "tj_xla_attrs"
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("size", c_int64),
                ("types", POINTER(c_int32)), ("names", POINTER(POINTER(TjXlaByteSpan))),
                ("attrs", POINTER(c_void_p))]


class TjXlaApiVersion(Structure):
    _c_name_ = "tj_xla_api_version"
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p),
                ("major_version", c_int), ("minor_version", c_int)]


class TjXlaApi(Structure):
    _c_name_ = "tj_xla_api"
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p),
                ("api_version", TjXlaApiVersion), ("internal_api", c_void_p),
                ("error_create", c_void_p), ("error_get_message", c_void_p),
                ("error_destroy", c_void_p), ("handler_register", c_void_p),
                ("stream_get", c_void_p), ("unused", c_void_p * 12),
                ("device_ordinal_get", c_void_p)]


class TjXlaCallFrame(Structure):
    _c_name_ = "tj_xla_call_frame"
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("api", c_void_p),
                ("ctx", c_void_p), ("stage", c_int32), ("args", TjXlaList),
                ("rets", TjXlaList), ("attrs", TjXlaAttrs), ("future", c_void_p)]


class TjXlaErrorCreateArgs(Structure):
    _c_name_ = "tj_xla_error_create_args"
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p),
                ("message", c_char_p), ("errc", c_int32)]


class TjXlaStreamGetArgs(Structure):
    _c_name_ = "tj_xla_stream_get_args"
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("ctx", c_void_p),
                ("stream", c_void_p)]


class TjXlaDeviceOrdinalGetArgs(Structure):
    _c_name_ = "tj_xla_device_ordinal_get_args"
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("ctx", c_void_p),
                ("device_ordinal", c_int32)]



# ---- torch.h: a kernel as a torch operator's implementation ---------------------------

# tj_torch_fallback: the C autograd kernel's way into Python's.
TorchFallback = CFUNCTYPE(c_int, c_void_p, POINTER(c_uint64), c_uint64, c_uint64, c_void_p,
                          c_size_t)


class TorchPlain(Structure):
    _c_name_ = "tj_torch_plain"
    _fields_ = [("meta_offset", c_int64), ("keyset_offset", c_int64),
                ("keysets", c_uint64 * abi.TJ_TORCH_MAX_KEYSETS), ("nkeysets", c_int32),
                ("tls_symbol", c_char_p), ("fw_grad", c_void_p), ("undefined", c_void_p)]


class TorchPlainObjects(Structure):
    _c_name_ = "tj_torch_plain_objects"
    _fields_ = [("impl_offset", c_int64), ("plain", POINTER(TorchPlain))]


class TorchReader(Structure):
    _c_name_ = "tj_torch_reader"
    _fields_ = [("impl_offset", c_int64), ("plain", POINTER(TorchPlain)),
                ("impl_vtable", c_void_p), ("dtypes", c_uint64), ("wrap", c_void_p)]


class TorchOp(Structure):
    _c_name_ = "tj_torch_op"
    _fields_ = [("ns", c_char_p), ("name", c_char_p), ("inputs", c_char_p),
                ("fallback", TorchFallback), ("context", c_void_p),
                ("plain", POINTER(TorchPlain)), ("output_order", POINTER(c_int32))]


__all__ = [name for name in dir() if name[0].isupper() and not name.startswith("_")]
