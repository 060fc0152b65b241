-- about: the category rules, in this one place (scalar macros); every sheet, the terminal, the diff, replay and the
--   exports classify through them. docs/categories.md lists each category with its patterns, sources and limits.
-- inputs:
-- includes:
-- macros:
--   communication_kernel(name): true when a GPU kernel's name says it moves data between devices: NCCL/RCCL,
--     DeepEP (its layout, epilogue and buffer-cleaning kernels are local work), NVSHMEM/rocSHMEM, MSCCL++, MORI's EP kernels,
--     vLLM/SGLang custom all-reduce (cross_device_reduce_*, quickreduce), PyTorch symmetric memory (multimem_*)
--     and any other kernel named after a collective (all_reduce, all_gather, reduce_scatter, all_to_all, all2all:
--     TensorRT-LLM/FlashInfer fused all-reduce, one/two-shot all-reduce, all_to_all_vdev) unless Inductor made it.
--   transfer_kernel(name): true for a kernel that is a device DMA (MTIA's dma_request): memcpy-like.
--   gpu_timeline_category(name, kind): the GPU timeline split: communication = communication kernels, memcpy =
--     memcpy ops and transfer kernels, computation = every other kernel and every memset (TraceLens's split, with
--     its nccl/rccl name test widened to communication_kernel).
--   op_base_name(name): lower-case op name without namespace (aten::), autograd wrapper, trailing _ or Backward.
--   op_category(name): GEMM, attention, convolution, embedding, normalization, elementwise, reduction, MoE,
--     communication, memcpy/memset, other: from the op's name alone, so one op name has one category in every
--     sheet, step and run.
--   kernel_category(name, kind): the same categories from a GPU op's name and kind; a kernel is MoE for the MoE
--     layer's own work (routing, top-k, token sorting, the combine of expert outputs), its expert GEMMs are GEMM.
-- notes: Deliberate differences from TraceLens's op categories: attention is its own category (TraceLens: other),
-- reductions are called reduction (TraceLens: reduce), normalization covers forward and backward (NORM_fwd/_bwd),
-- embedding lookups are their own category (TraceLens: other), and vector/matrix norms (linalg_vector_norm, its
-- NormTwoOps reduce kernel, _foreach_norm) are reductions, not normalization, and MoE layers are MoE (TraceLens: other,
-- or its MoE_fused/MoE_unfused/MoE_aux lists of op names).

create or replace macro communication_kernel(name) as
    regexp_matches(name, '(?i)nccl|rccl|nvshmem|rocshmem|roc_shmem|mscclpp|cross_device_reduce|quickreduce'
                         || '|multimem_|ep(dispatch|combine)(intra|inter)node')
    or (regexp_matches(name, '(deep_ep|dpsk::ep)::')
        and not regexp_matches(name, '(?i)get_dispatch_layout|layout::|epilogue|mask_buffer|clean_low_latency_buffer'))
    or (regexp_matches(name, '(?i)all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|all2all')
        and not regexp_matches(name, '^triton_(poi|red|per|tem)_'));

create or replace macro transfer_kernel(name) as
    regexp_matches(name, '^dma_request');

create or replace macro gpu_timeline_category(name, kind) as
    case
        when kind = 'memcpy' or (kind = 'kernel' and transfer_kernel(name)) then 'memcpy'
        when kind = 'kernel' and communication_kernel(name) then 'communication'
        else 'computation'
    end;

create or replace macro op_base_name(name) as
    regexp_replace(
        regexp_replace(
            regexp_replace(lower(name), '^autograd::engine::evaluate_function: ', ''),
            '^[a-z0-9_]+::', ''),
        '(_?backward\d*|_+)$', '');

create or replace macro op_category(name) as
    case
        when regexp_matches(lower(name), 'nccl|rccl|c10d|record_param_comms|gloo|symm_mem|deep_ep|custom_ar'
                                         || '|cross_device_reduce')
            or regexp_matches(op_base_name(name),
                              '^(inplace_|outplace_)?(all_?reduce|all_?gather(_into_tensor)?|reduce_?scatter(_tensor)?'
                              || '|all_?to_?all(_single)?|broadcast|barrier)(_coalesced)?$')
            then 'communication'
        -- MoE layers: vllm::moe_forward, fused experts, routing, top-k, align/sort (_moe_C::, sgl_kernel::, aiter::),
        -- triton_kernels' TopK and SortTokens autograd Functions; an Inductor kernel is not MoE by its name
        when regexp_matches(name, '^(TopK|SortTokens)(Backward)?$')
            or (regexp_matches(lower(name), 'moe|expert|topk_(softmax|sigmoid|gating)|grouped_topk')
                and not regexp_matches(lower(name), '^triton_(poi|red|per|tem)_'))
            then 'MoE'
        when regexp_matches(op_base_name(name), '^(_local_scalar_dense|item|_copy_from|_copy_from_and_resize)$')
            then 'memcpy/memset'
        when regexp_matches(op_base_name(name), 'scaled_dot_product|flash|attention|attn|sdpa|fmha')
            then 'attention'
        when regexp_matches(op_base_name(name),
                            '(^|_)(conv\dd|conv_transpose\dd|conv_tbc|conv_dilated\dd|conv_depthwise\dd|convolution)(_|$)')
            then 'convolution'
        when regexp_matches(op_base_name(name), 'embedding') and not regexp_matches(op_base_name(name), 'rotary')
            then 'embedding'
        when regexp_matches(op_base_name(name),
                            '^(mm|addmm|bmm|baddbmm|addbmm|matmul|linear|_scaled_mm|_scaled_grouped_mm|_grouped_mm'
                            || '|_int_mm|_addmm_activation|mv|addmv|dot|vdot)$'
                            -- fbgemm's GEMMs are named by their operand and output types (f8f8bf16_rowwise)
                            || '|^(f8f8|bf16bf16|i8i8|f8i4|bf16i4|f4f4)')
            or regexp_matches(replace(lower(name), 'fbgemm', ''), 'gemm')
            then 'GEMM'
        when regexp_matches(op_base_name(name),
                            '^(norm|linalg_vector_norm|linalg_norm|linalg_matrix_norm|frobenius_norm|nuclear_norm'
                            || '|renorm|_foreach_norm)$')
            then 'reduction'
        when regexp_matches(op_base_name(name), 'norm') then 'normalization'
        when regexp_matches(op_base_name(name),
                            '^(sum|nansum|mean|nanmean|max|min|amax|amin|aminmax|argmax|argmin|prod|std|var|std_mean'
                            || '|var_mean|all|any|logsumexp|cumsum|cumprod|count_nonzero|median|nanmedian|mode'
                            || '|nll_loss|nll_loss2d|nll_loss_forward|nll_loss2d_forward|cross_entropy_loss|mse_loss'
                            || '|binary_cross_entropy|binary_cross_entropy_with_logits|smooth_l1_loss|l1_loss)$'
                            || '|^_?(log_)?softmax')
            then 'reduction'
        when regexp_matches(op_base_name(name),
                            '^(add|sub|rsub|mul|div|true_divide|floor_divide|pow|neg|abs|sqrt|rsqrt|square|exp|exp2'
                            || '|expm1|log|log1p|log2|log10|sin|cos|tan|asin|acos|atan|atan2|sinh|cosh|tanh|sigmoid'
                            || '|logit|relu|relu6|gelu|silu|mish|hardswish|hardsigmoid|hardtanh|leaky_relu|elu|selu'
                            || '|celu|glu|softplus|threshold|clamp|clamp_min|clamp_max|clip|where|eq|ne|lt|le|gt|ge'
                            || '|logical_and|logical_or|logical_not|logical_xor|bitwise_and|bitwise_or|bitwise_not'
                            || '|bitwise_xor|maximum|minimum|fmax|fmin|floor|ceil|round|trunc|frac|sign|sgn'
                            || '|reciprocal|erf|erfc|erfinv|lerp|addcmul|addcdiv|fill|zero|copy|to|_to_copy|clone'
                            || '|contiguous|masked_fill|dropout|native_dropout|_fused_dropout|_masked_scale|triu|tril'
                            || '|isnan|isinf|isfinite|nan_to_num|remainder|fmod|hypot|xlogy|heaviside'
                            || '|_fused_adam|_fused_adamw|_fused_sgd)$|^_foreach_|elementwise')
            then 'elementwise'
        else 'other'
    end;

create or replace macro kernel_category(name, kind) as
    case
        when kind in ('memcpy', 'memset') or (kind = 'kernel' and transfer_kernel(name)) then 'memcpy/memset'
        when communication_kernel(name) then 'communication'
        -- the MoE layer's own kernels (routing, top-k, token sorting and alignment, the combine of expert outputs,
        -- DeepEP's local layout kernels); its expert GEMMs stay GEMM (docs/categories.md)
        when regexp_matches(name, '(?i)moe|expert|routing|topk_?(softmax|sigmoid|gating)|grouped_?topk|bitmatrix'
                                  || '|^_topk_forward|^_finalize_matmul|^_expt_data|(deep_ep|dpsk::ep)::')
            and not regexp_matches(name, '(?i)gemm|flatmm|::marlin<|^_?matmul_ogs|^bmm_|^fused_moe_kernel|fmoe_'
                                         || '|^triton_(poi|red|per|tem)_')
            then 'MoE'
        -- before convolution: cuDNN's attention kernels say fprop (cudnn_generated_fort_native_sdpa_sm90_flash_fprop_*)
        -- on the name without its parameter list: a parameter type is no kernel's job (TensorRT-LLM's
        -- quantize_with_block_size takes a flashinfer::QuantizationSFLayout)
        when regexp_matches(regexp_replace(name, '\([^()]*\)\s*$', ''), '(?i)flash|fmha|attn|attention|sdpa')
            then 'attention'
        -- conv as a word, not inside one (vllm::_typeConvert is no convolution)
        when regexp_matches(name, '(?i)(^|[^a-z])conv|conv_?(fwd|bwd|\dd)|convolution|implicit_gemm|fprop|dgrad'
                                  || '|wgrad|winograd|igemm_(fwd|bwd|wrw)|[sh]cudnn')
            then 'convolution'
        when regexp_matches(name, '(?i)embedding') and not regexp_matches(name, '(?i)rotary') then 'embedding'
        when regexp_matches(regexp_replace(name, '(?i)fbgemm', '', 'g'),
                            -- bmm_: TensorRT-LLM's batched GEMMs (bmm_MxE4m3_MxE2m1..., MoE experts on Blackwell)
                            -- fused_moe_kernel (Triton) and aiter's fmoe_* run a MoE layer's expert GEMMs
                            '(?i)gemm|cutlass|xmma|cublas|hipblaslt|cijk_|nvjet|matmul|wmma|^bmm_|::marlin<|flatmm'
                            || '|^fused_moe_kernel|fmoe_')
            then 'GEMM'
        when regexp_matches(name, '(?i)norm(zero|one|two|inf|minusinf)?ops|lpnorm') then 'reduction'
        when regexp_matches(name, '(?i)norm|rowwisemoments|welford|gammabeta|(^|[^a-z])bn_(fw|bw)')
            then 'normalization'
        when regexp_matches(name, '(?i)reduce|softmax|triton_red_|triton_per_|scan_kernel|cumsum') then 'reduction'
        when regexp_matches(name, '(?i)elementwise|vectorized|unrolled|pointwise|triton_poi_|foreach|fill|copy'
                                  -- the fused and foreach optimizers' kernels (multi_tensor_apply_kernel<..., AdamFunctor>)
                                  || '|multi_tensor_apply')
            then 'elementwise'
        else 'other'
    end;
