-- about: the category rules, in this one place (scalar macros).
-- inputs:
-- includes:
-- macros:
--   gpu_timeline_category(name, kind): TraceLens's GPU timeline split: communication = kernels named *nccl* or
--     *rccl* (any case), memcpy = memcpy ops, computation = every other kernel and every memset.
--   op_base_name(name): lower-case op name without namespace (aten::), autograd wrapper, trailing _ or Backward.
--   op_category(name, memory_only): GEMM, attention, convolution, normalization, elementwise, reduction,
--     communication, memcpy/memset, other. memory_only: true when all the GPU work the op launched (itself or
--     through the ops below it) is memcpy/memset, false when it includes a kernel, null when there is none.
--   kernel_category(name, kind): the same categories from a GPU op's name and kind.
-- notes: Deliberate differences from TraceLens's op categories: attention is its own category (TraceLens: other),
-- reductions are called reduction (TraceLens: reduce), normalization covers forward and backward (NORM_fwd/_bwd),
-- and an op whose own GPU work is only memcpy/memset (e.g. aten::_local_scalar_dense) is memcpy/memset.

create or replace macro gpu_timeline_category(name, kind) as
    case
        when kind = 'memcpy' then 'memcpy'
        when kind = 'kernel' and regexp_matches(name, '(?i)nccl|rccl') then 'communication'
        else 'computation'
    end;

create or replace macro op_base_name(name) as
    regexp_replace(
        regexp_replace(
            regexp_replace(lower(name), '^autograd::engine::evaluate_function: ', ''),
            '^[a-z0-9_]+::', ''),
        '(_?backward\d*|_+)$', '');

create or replace macro op_category(name, memory_only) as
    case
        when regexp_matches(lower(name), 'nccl|rccl|c10d|record_param_comms|gloo') then 'communication'
        when memory_only then 'memcpy/memset'
        when regexp_matches(op_base_name(name), 'scaled_dot_product|flash|attention|attn|sdpa|fmha')
            then 'attention'
        when regexp_matches(op_base_name(name),
                            '(^|_)(conv\dd|conv_transpose\dd|conv_tbc|conv_dilated\dd|conv_depthwise\dd|convolution)(_|$)')
            then 'convolution'
        when regexp_matches(op_base_name(name),
                            '^(mm|addmm|bmm|baddbmm|addbmm|matmul|linear|_scaled_mm|_scaled_grouped_mm|_grouped_mm'
                            || '|_int_mm|_addmm_activation|mv|addmv|dot|vdot)$|gemm')
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
        when kind in ('memcpy', 'memset') then 'memcpy/memset'
        when regexp_matches(name, '(?i)nccl|rccl') then 'communication'
        when regexp_matches(name, '(?i)conv|implicit_gemm|fprop|dgrad|wgrad|winograd|igemm_(fwd|bwd|wrw)')
            then 'convolution'
        when regexp_matches(name, '(?i)flash|fmha|attn|attention|sdpa') then 'attention'
        when regexp_matches(name, '(?i)gemm|cutlass|xmma|cublas|hipblaslt|cijk_|nvjet|matmul|wmma') then 'GEMM'
        when regexp_matches(name, '(?i)norm|rowwisemoments|welford|gammabeta') then 'normalization'
        when regexp_matches(name, '(?i)reduce|softmax|triton_red_|triton_per_|scan_kernel|cumsum') then 'reduction'
        when regexp_matches(name, '(?i)elementwise|vectorized|unrolled|pointwise|triton_poi_|foreach|fill|copy')
            then 'elementwise'
        else 'other'
    end;
