-- question: How many FLOPs and bytes does each modelled op call shape cost, what rates does it reach, and how far is it from the device's peak?
-- inputs: events, edges, graph_kernels, ranks, device_peaks, gemm
-- includes: lib/categories, lib/launches, lib/types, lib/shapes, lib/peaks
-- columns:
--   rank: rank
--   name: op name
--   category: model family: GEMM, SDPA_fwd, SDPA_bwd, CONV_fwd, CONV_bwd, Normalization, Normalization_bwd,
--     UnaryElementwise, BinaryElementwise, Reduce, Reduce_bwd
--   input_dims: compact JSON text, Input Dims of the calls (a GEMM backward node: of its forward op)
--   input_type: compact JSON text, Input type of the calls
--   concrete_inputs: compact JSON text, Concrete Inputs of the calls (stride, padding, causal, dims, ...); null for
--     GEMM rows (gemm does not split by them)
--   nested: true when the calls run inside another modelled call (aten::linear → aten::addmm, aten::layer_norm →
--     aten::native_layer_norm): sum rows with false to count each op once
--   compute_spec: matrix_DTYPE (GEMM, SDPA, CONV) or vector_DTYPE (the rest): the peak the op is held to
--   count: calls
--   gflops_per_call: GFLOP per call (docs/perf_models.md, per family)
--   bytes_per_call: bytes per call: tensors read and written once each (docs/perf_models.md)
--   kernel_total_us: µs, summed subtree kernel time of the calls
--   kernel_mean_us: µs, mean subtree kernel time per call
--   tflops_per_s: TFLOP/s, count · gflops_per_call / kernel_total_us
--   tb_per_s: TB/s, count · bytes_per_call / kernel_total_us
--   arithmetic_intensity: FLOP/byte, gflops_per_call · 1e9 / bytes_per_call
--   device: the peaks table's device the rank's GPU matched (null: unknown device, see peak_note)
--   peak_tflops_per_s: TFLOP/s, the device's dense peak for compute_spec
--   peak_tb_per_s: TB/s, the device's HBM bandwidth
--   bound: compute or memory: arithmetic_intensity at or above the ridge point peak_tflops_per_s / peak_tb_per_s
--   percent_of_peak: %, of the bounding resource: 100 · tflops_per_s / peak_tflops_per_s when compute bound,
--     100 · tb_per_s / peak_tb_per_s when memory bound (null without a peak)
--   peak_note: why percent_of_peak is null for a row with a model (unknown device, no peak for the datatype)
-- notes: GEMM rows are the `gemm` analysis's (its shapes, FLOPs and bytes). The other families are modelled here
--   from Input Dims, Input type and Concrete Inputs (stride, padding, causal, reduced dims), once per distinct call
--   shape; a call whose shape cannot be read keeps null FLOPs and bytes. Kernel time is the subtree kernel time
--   of the calls, as in `gemm`. Formulas, their sources, and where they follow TraceLens's conventions:
--   docs/perf_models.md. Ops whose FLOPs the trace does not determine are not modelled: paged/varlen attention
--   (vLLM's unified_attention: no context lengths in the shapes; flash_attn varlen: cu_seqlens values absent) and
--   fused MoE ops (vllm::moe_forward: no expert weights, no top-k).
with
-- per distinct op name: regexes are cheaper on a few names than on every call (materialized: else the optimizer
-- moves the CASE into a filter over every call, 0.02 s of OWLv2's 0.15)
family_names as materialized (
    select name,
        case
            when name in ('aten::_scaled_dot_product_flash_attention', 'aten::_scaled_dot_product_efficient_attention',
                          'aten::_scaled_dot_product_cudnn_attention', 'aten::scaled_dot_product_attention',
                          'aten::_scaled_dot_product_flash_attention_for_cpu', 'aten::_flash_attention_forward',
                          'aten::_efficient_attention_forward', 'flash_attn::_flash_attn_forward') then 'SDPA_fwd'
            when name in ('aten::_scaled_dot_product_flash_attention_backward',
                          'aten::_scaled_dot_product_efficient_attention_backward',
                          'aten::_scaled_dot_product_cudnn_attention_backward', 'aten::_flash_attention_backward',
                          'flash_attn::_flash_attn_backward') then 'SDPA_bwd'
            when name in ('aten::convolution', 'aten::_convolution', 'aten::conv1d', 'aten::conv2d', 'aten::conv3d',
                          'aten::cudnn_convolution', 'aten::miopen_convolution') then 'CONV_fwd'
            when name = 'aten::convolution_backward' then 'CONV_bwd'
            when name in ('aten::layer_norm', 'aten::native_layer_norm', 'aten::batch_norm', 'aten::native_batch_norm',
                          'aten::_batch_norm_impl_index', 'aten::cudnn_batch_norm', 'aten::miopen_batch_norm',
                          'aten::group_norm', 'aten::native_group_norm', 'aten::rms_norm', 'aten::_fused_rms_norm',
                          '_C::rms_norm', '_C::fused_add_rms_norm') then 'Normalization'
            when name in ('aten::native_layer_norm_backward', 'aten::native_batch_norm_backward',
                          'aten::cudnn_batch_norm_backward', 'aten::miopen_batch_norm_backward',
                          'aten::native_group_norm_backward') then 'Normalization_bwd'
            when regexp_matches(name, '^aten::(add|sub|rsub|mul|div|maximum|minimum|pow|fmod|remainder|atan2'
                                      || '|threshold_backward|gelu_backward|silu_backward|sigmoid_backward'
                                      || '|tanh_backward|hardtanh_backward|leaky_relu_backward)_?$')
                 or regexp_matches(name, '^aten::(copy|neg|abs|exp|exp2|log|log2|log1p|sqrt|rsqrt|reciprocal|sin'
                                         || '|cos|tanh|sigmoid|relu|gelu|silu|erf|sign|clamp|clamp_min|clamp_max'
                                         || '|hardtanh|leaky_relu|floor|ceil|round|trunc|square)_?$')
                then 'Elementwise'  -- unary or is_binary by the call's second input (a tensor or not)
            when regexp_matches(name, '^aten::(sum|mean|amax|amin|max|min|prod|argmax|argmin|var|std|norm'
                                      || '|linalg_vector_norm|logsumexp)$') then 'Reduce'
            when name in ('aten::softmax', 'aten::_softmax', 'aten::log_softmax', 'aten::_log_softmax') then 'Softmax'
            when name in ('aten::_softmax_backward_data', 'aten::_log_softmax_backward_data') then 'Reduce_bwd'
        end as family
    from (select distinct name from op_calls())
),
family_calls as materialized (
    select c.rank, c.id, c.name, f.family, c.pid, c.tid, c.ts, c.ts + c.dur as end_ts, c.subtree_ns, c.input_dims,
           c.input_type, e.concrete_inputs
    from op_calls() c
    join family_names f on f.name = c.name and f.family is not null
    join events e on e.rank = c.rank and e.id = c.id
),
calls as (
    select *,
           -- inside another modelled call: one that starts earlier on the thread (on a tie, the outer one comes
           -- first, as the nest edges order them) and ends no earlier
           coalesce(max(end_ts) over (partition by rank, pid, tid order by ts, end_ts desc, id
                                      rows between unbounded preceding and 1 preceding) >= end_ts, false) as nested
    from family_calls
),
grouped as (  -- shapes are parsed once per distinct shape, not per call
    select rank, name, family, input_dims, input_type, concrete_inputs, nested,
           count(*) as count, sum(subtree_ns) as kernel_ns
    from calls
    group by all
),
shaped as materialized (
    select *, list_transform(types, lambda t: dtype_bytes(t)) as type_bytes  -- once, not at each use (planning)
    from (select *, try_cast(input_dims as bigint[][]) as dims, try_cast(input_type as varchar[]) as types,
                 try_cast(concrete_inputs as varchar[]) as conc
          from grouped)
),
-- attention: Q, K, V as [B, H, N, d] (flash-style ops write [B, N, H, d]: transposed here); FLOPs
-- 2·B·Hq·Nq·Nkv·(d_qk + d_v), halved when causal; backward 2.5 × forward
sdpa_args as (
    select *,
           if(family = 'SDPA_bwd', 1, 0) as shift,
           name in ('aten::_flash_attention_forward', 'aten::_flash_attention_backward',
                    'aten::_efficient_attention_forward', 'flash_attn::_flash_attn_forward',
                    'flash_attn::_flash_attn_backward') as bnhd,
           case name
               when 'aten::_efficient_attention_forward' then coalesce(conc[10], '0') not in ('0', '')
               else lower(conc[case name
                                   when 'aten::_scaled_dot_product_flash_attention' then 5
                                   when 'aten::_scaled_dot_product_flash_attention_for_cpu' then 5
                                   when 'aten::scaled_dot_product_attention' then 6
                                   when 'aten::_flash_attention_forward' then 9
                                   when 'flash_attn::_flash_attn_forward' then 6
                                   when 'aten::_scaled_dot_product_flash_attention_backward' then 12
                                   when 'aten::_scaled_dot_product_efficient_attention_backward' then 12
                                   when 'aten::_flash_attention_backward' then 12
                                   when 'flash_attn::_flash_attn_backward' then 12
                                   when 'aten::_scaled_dot_product_cudnn_attention_backward' then 15
                                   else 7 end]) = 'true'
           end as causal
    from shaped where family in ('SDPA_fwd', 'SDPA_bwd')
),
sdpa as (
    select *,
           (if(family = 'SDPA_bwd', 2.5, 1.0) * if(causal, 0.5, 1.0)
               * 2 * q[1] * q[2] * q[3] * k[3] * (q[4] + v[4]))::double as flops,
           ((dims_numel(q) + dims_numel(k) + dims_numel(v) + q[1] * q[2] * q[3] * v[4])
               * if(family = 'SDPA_bwd', 2, 1) * type_bytes[1 + shift])::double as bytes,
           'matrix_' || spec_dtype(types[1 + shift]) as compute_spec
    from (select *,
                 if(bnhd, [q_raw[1], q_raw[3], q_raw[2], q_raw[4]], q_raw) as q,
                 if(bnhd, [k_raw[1], k_raw[3], k_raw[2], k_raw[4]], k_raw) as k,
                 if(bnhd, [v_raw[1], v_raw[3], v_raw[2], v_raw[4]], v_raw) as v
          -- varlen calls (cu_seqlens given) write Q as [total tokens, H, d]: 3 dims, no per-sequence lengths
          from (select *, dims[1 + shift] as q_raw, dims[2 + shift] as k_raw, dims[3 + shift] as v_raw from sdpa_args)
          where len(q_raw) = 4 and len(k_raw) = 4 and len(v_raw) = 4)
),
-- convolution: MACs = output elements · (C_in / groups) · kernel elements; FLOPs 2·MACs (+ a bias add per output)
conv_args as (
    select *,
           case name when 'aten::convolution_backward' then dims[2] else dims[1] end as x,
           case name when 'aten::convolution_backward' then dims[3] else dims[2] end as w,
           case name when 'aten::convolution_backward' then dims[1] end as grad_out,
           case when name in ('aten::convolution', 'aten::_convolution', 'aten::conv1d', 'aten::conv2d',
                              'aten::conv3d', 'aten::miopen_convolution') then dims[3] end as bias,
           try_cast(conc[case name when 'aten::cudnn_convolution' then 4 when 'aten::miopen_convolution' then 5
                                   when 'aten::convolution_backward' then 5 else 4 end] as bigint[]) as stride_raw,
           try_cast(conc[case name when 'aten::cudnn_convolution' then 3 when 'aten::miopen_convolution' then 4
                                   when 'aten::convolution_backward' then 6 else 5 end] as bigint[]) as padding_raw,
           try_cast(conc[case name when 'aten::cudnn_convolution' then 5 when 'aten::miopen_convolution' then 6
                                   when 'aten::convolution_backward' then 7 else 6 end] as bigint[]) as dilation_raw,
           coalesce(lower(conc[case name when 'aten::convolution_backward' then 8 else 7 end]) = 'true'
                    and name in ('aten::convolution', 'aten::_convolution', 'aten::convolution_backward'), false)
               as transposed,
           coalesce(try_cast(conc[8] as bigint[]), [0]) as output_padding_raw,
           coalesce(try_cast(conc[9] as bigint), 1) as transposed_groups,
           coalesce(try_cast(conc[11] as boolean[]), [true, true, false]) as output_mask
    from shaped where family in ('CONV_fwd', 'CONV_bwd')
),
conv_out as (
    select *,
           case
               when grad_out is not null then grad_out
               when transposed then [x[1], w[2] * transposed_groups] || list_transform(range(1, len(x) - 1), lambda i:
                   (x[i + 2] - 1) * per_dim(stride_raw, i) - 2 * per_dim(padding_raw, i)
                   + per_dim(dilation_raw, i) * (w[i + 2] - 1) + per_dim(output_padding_raw, i) + 1)
               else [x[1], w[1]] || list_transform(range(1, len(x) - 1), lambda i:
                   (x[i + 2] + 2 * per_dim(padding_raw, i) - per_dim(dilation_raw, i) * (w[i + 2] - 1) - 1)
                       // per_dim(stride_raw, i) + 1)
           end as y
    from (select * from conv_args
          where len(x) >= 3 and len(w) = len(x) and stride_raw is not null and padding_raw is not null
            and dilation_raw is not null)
),
conv as (
    select *,
           (2 * macs * if(family = 'CONV_bwd', output_mask[1]::int + output_mask[2]::int, 1)
               + if(family = 'CONV_fwd' and coalesce(len(bias) > 0, false), dims_numel(y), 0))::double as flops,
           ((dims_numel(x) + dims_numel(w) + dims_numel(y)
               + if(family = 'CONV_fwd', coalesce(dims_numel(bias) * (len(bias) > 0)::int, 0),
                    output_mask[1]::int * dims_numel(x) + output_mask[2]::int * dims_numel(w)))
               * type_bytes[if(family = 'CONV_bwd', 2, 1)])::double as bytes,
           'matrix_' || spec_dtype(types[if(family = 'CONV_bwd', 2, 1)]) as compute_spec
    from (select *,
                 -- weight [C_out, C_in/groups, k...] (transposed: [C_in, C_out/groups, k...])
                 dims_numel(if(transposed, x, y)) * dims_numel(w) // w[1] as macs
          from conv_out where list_min(y) > 0)
),
-- normalization over N elements with C per-channel parameters (TraceLens's convention: 5·N + 6·C FLOPs,
-- (2·N + 6·C) elements moved); RMSNorm 4·N FLOPs, (2·N + C) elements; backward 2 × forward FLOPs, (3·N + 3·C)
norm_args as (
    select *,
           case when name = '_C::rms_norm' then dims[2] else dims[1] end as x,
           case when name = '_C::rms_norm' then types[2] else types[1] end as x_type,
           case when name = '_C::rms_norm' then type_bytes[2] else type_bytes[1] end as x_bytes,
           case
               when name in ('aten::rms_norm', 'aten::_fused_rms_norm', '_C::rms_norm') then 'rms'
               when name = '_C::fused_add_rms_norm' then 'add_rms'
               else 'stats'
           end as kind
    from shaped where family in ('Normalization', 'Normalization_bwd')
),
norm as (
    select *,
           case
               when kind = 'rms' then 4 * n
               when kind = 'add_rms' then 5 * n
               else (5 * n + 6 * c) * if(family = 'Normalization_bwd', 2, 1)
           end::double as flops,
           (case
               when kind = 'rms' then 2 * n + c
               when kind = 'add_rms' then 4 * n + c
               when family = 'Normalization_bwd' then 3 * n + 3 * c
               else 2 * n + 6 * c
           end * x_bytes)::double as bytes,
           'vector_' || spec_dtype(x_type) as compute_spec
    from (select *, dims_numel(x) as n,
                 case
                     when name in ('aten::layer_norm', 'aten::native_layer_norm', 'aten::rms_norm',
                                   'aten::_fused_rms_norm')
                         then coalesce(dims_numel(try_cast(conc[2] as bigint[])), x[-1])
                     when name in ('_C::rms_norm', '_C::fused_add_rms_norm') then x[-1]
                     when name = 'aten::native_layer_norm_backward'
                         then coalesce(dims_numel(try_cast(conc[3] as bigint[])), x[-1])
                     else x[2]  -- batch and group norm: channels
                 end as c
          from norm_args where len(x) >= 2)
),
-- elementwise: FLOPs one per output element; bytes every tensor input plus the output (broadcast shape)
elementwise as (
    select *,
           out_numel::double as flops,
           (if(is_binary, dims_numel(a) * type_bytes[1] + dims_numel(b) * type_bytes[2]
                           + out_numel * type_bytes[if(len(a) > 0, 1, 2)],
               -- copy_(self, src): writes self, reads src; the other unary ops read and write one type
               out_numel * (type_bytes[1]
                            + if(name = 'aten::copy_', coalesce(type_bytes[2], type_bytes[1]),
                                 type_bytes[1]))))::double as bytes,
           'vector_' || spec_dtype(types[1]) as compute_spec
    from (select *, if(is_binary, dims_numel(broadcast_dims(a, b)), dims_numel(a)) as out_numel
          from (select *, dims[1] as a, dims[2] as b,
                       name <> 'aten::copy_' and len(dims) >= 2 and type_bytes[2] is not null as is_binary
                from shaped where family = 'Elementwise' and len(dims) >= 1 and type_bytes[1] is not null))
),
-- reductions: FLOPs one per input element; bytes input plus output. Softmax: 5 FLOPs per element (max, subtract,
-- exp, sum, divide), input plus an output of the same shape; softmax backward 4 per element, 3 tensors
reduce_args as (
    select *, dims[1] as x, dims_numel(dims[1]) as n,
           coalesce(try_cast(conc[2] as bigint[]), [try_cast(conc[2] as bigint)]) as reduced
    from shaped where family in ('Reduce', 'Softmax', 'Reduce_bwd') and len(dims) >= 1
),
reduce as (
    select *,
           (case family when 'Softmax' then 5 * n when 'Reduce_bwd' then 4 * n else n end)::double as flops,
           (case family
                when 'Softmax' then n * (type_bytes[1] + if(lower(conc[3]) = 'true', 4, type_bytes[1]))
                when 'Reduce_bwd' then 3 * n * type_bytes[1]
                else (n + out_numel) * type_bytes[1]
            end)::double as bytes,
           'vector_' || spec_dtype(types[1]) as compute_spec
    from (select *,
                 case
                     when reduced is null or len(reduced) = 0 or list_contains(reduced, null) then 1
                     else n // dims_numel(list_transform(list_distinct(reduced),
                                                         lambda d: x[if(d < 0, d + len(x) + 1, d + 1)]))
                 end as out_numel
          from reduce_args)
),
modelled as (
    select rank, name, family as category, input_dims, input_type, concrete_inputs, nested, compute_spec, count,
           kernel_ns, flops, bytes
    from sdpa
    union all
    select rank, name, family, input_dims, input_type, concrete_inputs, nested, compute_spec, count, kernel_ns, flops,
           bytes
    from conv
    union all
    select rank, name, family, input_dims, input_type, concrete_inputs, nested, compute_spec, count, kernel_ns, flops,
           bytes
    from norm
    union all
    select rank, name, if(is_binary, 'BinaryElementwise', 'UnaryElementwise'), input_dims, input_type,
           concrete_inputs, nested, compute_spec, count, kernel_ns, flops, bytes
    from elementwise
    union all
    select rank, name, if(family = 'Softmax', 'Reduce', family), input_dims, input_type, concrete_inputs, nested,
           compute_spec, count, kernel_ns, flops, bytes
    from reduce
    union all
    select rank, name, 'GEMM', input_dims, input_type, null, nested_in_gemm,
           'matrix_' || spec_dtype(try_cast(input_type as varchar[])[if(op_base_name(name) in ('addmm', 'baddbmm'),
                                                                         2, 1)]),
           count, round(kernel_total_us * 1e3)::bigint, gflops_per_call * 1e9, bytes_per_call::double
    from gemm
),
peaked as (
    select m.*, d.device, d.peak_note,
           case when split_part(m.compute_spec, '_', 1) = 'matrix' then p.matrix_tflops else p.vector_tflops end
               as peak_tflops_per_s,
           p.hbm_tb_per_s as peak_tb_per_s
    from modelled m
    left join rank_devices() d on d.rank = m.rank
    left join device_peaks p on p.device = d.device and p.dtype = split_part(m.compute_spec, '_', 2)
)
select rank, name, category, json(input_dims)::varchar as input_dims, json(input_type)::varchar as input_type,
       json(concrete_inputs)::varchar as concrete_inputs, nested,
       compute_spec, count,
       flops / 1e9 as gflops_per_call,
       bytes as bytes_per_call,
       kernel_ns / 1e3 as kernel_total_us,
       kernel_ns / count / 1e3 as kernel_mean_us,
       count * flops / nullif(kernel_ns, 0) / 1e3 as tflops_per_s,
       count * bytes / nullif(kernel_ns, 0) / 1e3 as tb_per_s,
       flops / nullif(bytes, 0) as arithmetic_intensity,
       device, peak_tflops_per_s, peak_tb_per_s,
       case when flops / nullif(bytes, 0) >= peak_tflops_per_s / peak_tb_per_s then 'compute'
            when flops / nullif(bytes, 0) < peak_tflops_per_s / peak_tb_per_s then 'memory' end as bound,
       -- the share of the bounding resource: the larger of the two shares (the roofline's attainable rate)
       if(peak_tflops_per_s is null or peak_tb_per_s is null, null,
          100 * greatest(count * flops / nullif(kernel_ns, 0) / 1e3 / peak_tflops_per_s,
                         count * bytes / nullif(kernel_ns, 0) / 1e3 / peak_tb_per_s)) as percent_of_peak,
       case
           when flops is null then null
           when peak_note is not null then peak_note
           when peak_tflops_per_s is null then 'no ' || split_part(compute_spec, '_', 1) || ' peak for '
                                                || split_part(compute_spec, '_', 2)
                                                || ' on ' || device
       end as peak_note
from peaked
order by rank, kernel_total_us desc, name, input_dims, input_type, concrete_inputs, nested, gflops_per_call,
         bytes_per_call, count
