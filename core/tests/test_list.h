/*
 * The explicit list of C tests, in the order main runs them. A test must be
 * both listed here and defined with TEST(name): either half alone fails to
 * link, so a test can neither be forgotten nor silently skipped.
 */
#ifndef TILEJIT_TESTS_TEST_LIST_H_
#define TILEJIT_TESTS_TEST_LIST_H_

#define TJT_TEST_LIST(X)                              \
  /* test_abi.c */                                    \
  X(abi_published_layout)                             \
  X(abi_enum_values)                                  \
  X(abi_reference)                                    \
  X(version)                                          \
  X(names_status)                                     \
  X(error_argument_message_as_printf)                 \
  X(names_device)                                     \
  X(names_dtype)                                      \
  /* test_expr.c */                                   \
  X(expr_arithmetic)                                  \
  X(expr_floor_semantics)                             \
  X(expr_symbols)                                     \
  X(expr_division_by_zero)                            \
  X(expr_overflow)                                    \
  X(expr_eval_malformed)                              \
  X(expr_add_rejects_malformed)                       \
  X(expr_add_after_finalize)                          \
  /* test_arg.c */                                    \
  X(arg_init_is_none)                                 \
  X(arg_legacy_import)                                \
  X(arg_legacy_null_deleter)                          \
  X(arg_versioned_import)                             \
  X(arg_versioned_newer_minor)                        \
  X(arg_versioned_read_only)                          \
  X(arg_versioned_major_rejected)                     \
  X(arg_from_dltensor)                                \
  /* test_host.c */                                   \
  X(host_call_classifies_builtin_scalars)             \
  X(host_call_reads_exact_ints_in_place)              \
  X(host_call_described_kinds)                        \
  X(host_registry_grows)                              \
  X(host_call_stream_and_keywords)                    \
  X(host_call_results_in_order)                       \
  X(host_call_reads_in_place_before_importing)        \
  X(host_dlpack_producer_makes_outputs_in_place)      \
  X(host_call_producer_errors_and_claims)             \
  X(host_call_repeats_in_one_pass_as_the_full_checks) \
  X(host_claims_asked_of_the_host)                    \
  X(host_calls_claimed_at_once_go_to_record)          \
  X(host_method_entry)                                \
  /* test_call.c */                                   \
  X(call_run_imports_binds_allocates)                 \
  X(call_run_count_first)                             \
  X(call_run_optional_left_out)                       \
  X(call_refuses_null_pointers)                       \
  X(call_run_import_failure)                          \
  X(call_run_refuses_lazy_views)                      \
  X(call_run_validation_failure)                      \
  X(call_run_allocation_failure)                      \
  X(call_run_producer_error_pending)                  \
  X(call_run_streams)                                 \
  X(call_run_packs_repeated_cpu_calls)                \
  X(call_run_packs_in_the_functions_order)            \
  X(call_run_releases_owned_imports)                  \
  X(call_run_core_allocates_host_outputs)             \
  X(call_run_core_allocates_host_workspaces)          \
  X(bound_launch_binds_once_and_replays)              \
  X(bound_launch_core_allocates_host_outputs)         \
  X(bound_launch_update)                              \
  X(bound_launch_failures_own_the_records)            \
  X(call_run_claims)                                  \
  X(call_run_claims_at_once)                          \
  X(call_run_claims_asked)                            \
  X(call_run_claims_skip_objects_without_a_record)    \
  X(call_run_scalar_binds_symbols)                    \
  X(call_run_scalar_symbol_agreement)                 \
  X(call_run_workspaces)                              \
  X(producer_from_exchange_versions)                  \
  X(producer_exchange_view_or_export)                 \
  X(producer_import_owned)                            \
  X(arg_from_capsule)                                 \
  /* test_memo.c */                                   \
  X(memo_matches_full_checks)                         \
  X(memo_pack_matches_full_checks)                    \
  X(memo_hit_rechecks_addresses)                      \
  X(memo_keeps_a_few_shapes)                          \
  X(memo_not_kept_for_pointers)                       \
  X(memo_threads)                                     \
  /* test_validate.c */                               \
  X(validate_ok)                                      \
  X(scalar_range_answers_as_scalar_fits)              \
  X(validate_wrong_arg_count)                         \
  X(validate_non_tensor)                              \
  X(validate_none_not_optional)                       \
  X(validate_optional_none)                           \
  X(validate_dtype)                                   \
  X(validate_ndim)                                    \
  X(validate_static_dim)                              \
  X(validate_symbol_conflict)                         \
  X(validate_expression_mismatch)                     \
  X(validate_divisibility)                            \
  X(validate_non_compact)                             \
  X(validate_stride_mismatch)                         \
  X(validate_symbols_from_strides)                    \
  X(validate_misaligned)                              \
  X(validate_wrong_device_type)                       \
  X(validate_different_devices)                       \
  X(validate_read_only)                               \
  X(validate_negative_stride)                         \
  X(validate_null_strides_compact)                    \
  X(validate_size1_strides_ignored)                   \
  X(validate_zero_size)                               \
  X(validate_loose_stride_symbols)                    \
  X(validate_negative_shape)                          \
  X(validate_size_overflow)                           \
  X(validate_null_data)                               \
  X(validate_scalar_int_range)                        \
  X(validate_scalar_uint64_beyond_int64)              \
  X(validate_scalar_float32_range)                    \
  X(validate_scalar_kinds)                            \
  X(validate_pointer)                                 \
  X(validate_message_format)                          \
  X(validate_output_shapes)                           \
  X(validate_output_eval_error)                       \
  X(validate_set_output)                              \
  X(validate_set_output_expressions)                  \
  X(validate_output_only_tensor)                      \
  X(validate_not_finalized)                           \
  X(finalize_rejects_unbound_symbol)                  \
  X(kernel_construction_errors)                       \
  X(kernel_introspection)                             \
  /* test_launch.c */                                 \
  X(launch_fixture_vec_add)                           \
  X(launch_packing)                                   \
  X(launch_missing_library)                           \
  X(launch_missing_symbol)                            \
  X(launch_load_twice)                                \
  X(launch_output_not_set)                            \
  X(launch_no_entry)                                  \
  X(launch_cuda_skips_cpu_entry)                      \
  X(launch_threads)                                   \
  X(launch_abi_order)                                 \
  X(launch_status_returned)                           \
  X(launch_prebuilt_library)                          \
  X(call_run_exchange_vec_add)                        \
  /* test_cuda.c */                                   \
  X(cuda_no_driver)                                   \
  X(cuda_init_failure_is_retried)                     \
  X(cuda_outputs_need_a_producer)                     \
  X(cuda_launch_records_everything)                   \
  X(cuda_module_once_per_context)                     \
  X(cuda_current_context_used)                        \
  X(cuda_steady_state_driver_calls)                   \
  X(cuda_bound_launch)                                \
  X(cuda_capture_loads_no_module)                     \
  X(cuda_dynamic_shared_memory)                       \
  X(cuda_launch_error_message)                        \
  X(cuda_missing_function)                            \
  X(cuda_empty_grid_no_launch)                        \
  X(cuda_bad_launch_configuration)                    \
  X(cuda_kernel_setup_errors)                         \
  X(cuda_image_file)                                  \
  X(cuda_device_capability)                           \
  X(cuda_threads)                                     \
  X(cuda_abi_order_and_widths)                        \
  X(cuda_repeated_calls_launch_as_the_first)          \
  X(cuda_param_info_checked)                          \
  X(cuda_tensor_map_encode_error_names_the_map)       \
  X(cuda_im2col_map_and_zeroed_workspace)             \
  X(cuda_launches_tensor_maps_and_attributes)         \
  X(cuda_signature_reads_back)                        \
  /* test_layout.c */                                 \
  X(layout_init_and_format)                           \
  X(layout_init_errors)                               \
  X(layout_format_limits)                             \
  X(layout_ref_mark_dynamic)                          \
  X(layout_mark_dynamic_rules)                        \
  X(layout_implicit_leading_dim)                      \
  X(layout_ref_stride_order)                          \
  X(layout_ref_mark_compact)                          \
  X(layout_mark_compact_rules)                        \
  X(layout_names)                                     \
  X(layout_assumed_align)                             \
  X(layout_random_compact)                            \
  X(layout_random_mark_dynamic)                       \
  /* test_fuzz_findings.c */                          \
  X(fuzz_exchange_chain_cycle)                        \
  X(fuzz_object_without_producer)                     \
  X(fuzz_cuda_record_without_launch)                  \
  /* test_open.c */                                   \
  X(open_sha256)                                      \
  X(open_calls_an_export)                             \
  X(open_refuses_damaged_exports)                     \
  X(open_reads_what_the_export_says)                  \
  X(open_keeps_what_it_checked)                       \
  X(open_refuses_links_fifos_and_nul)                 \
  /* test_torch.c */                                  \
  X(torch_without_libtorch)                           \
  X(torch_refuses_null_arguments)                     \
  X(torch_plain_object_reads_in_place)                \
  X(torch_reads_and_makes_nothing_without_libtorch)   \
  /* test_xla.c */                                    \
  X(xla_handler_runs_a_registered_kernel)             \
  X(xla_handler_answers_the_metadata_query)

#endif /* TILEJIT_TESTS_TEST_LIST_H_ */
