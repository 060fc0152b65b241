-- question: How many FLOPs do the GEMM ops do, and what throughput and arithmetic intensity do they reach, per rank and shape?
-- inputs: events, edges, graph_kernels
-- includes: lib/categories, lib/launches, lib/types
-- columns:
--   rank: rank
--   name: op name (aten::mm, addmm, bmm, baddbmm, matmul, linear, _scaled_mm, vLLM's rocm_unquantized_gemm, or a GEMM
--     autograd node such as AddmmBackward0)
--   input_dims: compact JSON text, Input Dims of the calls (for a backward node: of its forward op)
--   input_type: compact JSON text, Input type of the calls (for a backward node: of its forward op)
--   nested_in_gemm: true when the calls run inside another GEMM op of this table (aten::linear → aten::addmm): sum rows with false to count each GEMM once
--   bias: true when the call adds a bias (addmm, baddbmm, linear with a non-empty bias input; never a backward node)
--   batch: batch count (bmm, baddbmm, matmul with batched second operand), 1 otherwise
--   m: rows of the product
--   n: columns of the product
--   k: reduced dimension
--   count: calls
--   gflops_per_call: GFLOP, 2·batch·M·N·K per call, plus batch·M·N for a bias add; a backward node: 2 × 2·batch·M·N·K (both operand gradients, no bias)
--   kernel_total_us: µs, summed subtree kernel time of the calls
--   kernel_mean_us: µs, mean subtree kernel time per call
--   tflops_per_s: TFLOP/s, count · gflops_per_call / kernel_total_us
--   bytes_per_call: bytes, tensor inputs plus the output (batch·M·N elements of the first operand's dtype), from Input Dims and Input type element sizes
--   arithmetic_intensity: FLOP/byte, gflops_per_call · 1e9 / bytes_per_call
--   tb_per_s: TB/s, count · bytes_per_call / kernel_total_us
-- notes: Shapes are read from events.input_dims (JSON cast to BIGINT[][]), by op: mm/_scaled_mm (A[M,K], B[K,N]);
--   addmm (bias, A[M,K], B[K,N]); bmm (A[b,M,K], B[b,K,N]); baddbmm (bias, A, B as bmm); matmul (A[...,M,K] or
--   A[K], B[K,N] folds A's leading dims into M, B[...,K,N] with 3+ dims gives batch = larger leading product);
--   linear and vllm::rocm_unquantized_gemm (input[...,K], weight[N,K], optional bias) with M = product of input's
--   leading dims. A GEMM backward
--   node (AddmmBackward0, MmBackward0, ...) carries no shapes: it takes those of the forward op with the same
--   sequence number and base name on the rank (the latest one starting before it), and counts twice the forward
--   FLOPs (gradients of both operands; a bias gradient is a reduction and is not counted). Calls whose shapes
--   cannot be read keep null m/n/k and FLOPs. Kernel time is the call's subtree kernel time: for ops that launch
--   their own kernels (mm, addmm, bmm) it equals their direct time (TraceLens's choice, cuBLAS memsets
--   included), and for ops that launch through children (linear, matmul, backward nodes) it is the only time that
--   covers their GEMM; nested rows are flagged so totals need not double count (nested: inside another GEMM
--   call on the same thread by time containment, as the nest edges define it). Bias FLOPs and bytes follow
--   TraceLens's GEMM.csv (bias counted as an input; MB there are MiB).
with
gemm_names as (  -- per distinct op name: regexes are cheaper on a few names than on every call
    -- vLLM's ROCm GEMM takes linear's arguments (input[...,K], weight[N,K], optional bias)
    select name, if(name = 'vllm::rocm_unquantized_gemm', 'linear', op_base_name(name)) as base,
           regexp_matches(name, '^(Mm|Addmm|Bmm|Baddbmm|Matmul|Linear|ScaledMm)Backward\d*$') as is_backward
    from (select distinct name from op_calls())
    where regexp_matches(name, '^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm)$')
       or name = 'vllm::rocm_unquantized_gemm'
       or regexp_matches(name, '^(Mm|Addmm|Bmm|Baddbmm|Matmul|Linear|ScaledMm)Backward\d*$')
),
gemm_calls as materialized (
    select c.rank, c.id, c.name, c.pid, c.tid, c.ts, c.ts + c.dur as end_ts, c.subtree_ns, c.input_dims,
           c.input_type, c.sequence_number, g.base, g.is_backward
    from op_calls() c join gemm_names g on g.name = c.name
),
forward_of as (
    -- a backward node's forward op: same rank, sequence number and base name, latest start before the node
    select b.rank, b.id, f.input_dims, f.input_type,
           row_number() over (partition by b.rank, b.id order by f.ts desc, f.id desc) as choice
    from gemm_calls b
    join gemm_calls f on f.rank = b.rank and f.sequence_number = b.sequence_number and f.base = b.base
                     and not f.is_backward and f.ts < b.ts
    where b.is_backward
),
calls as (
    select c.rank, c.name, c.base, c.is_backward, c.subtree_ns,
           coalesce(f.input_dims, c.input_dims) as input_dims, coalesce(f.input_type, c.input_type) as input_type,
           -- inside another GEMM call: one that starts earlier on the thread (on a tie, the outer one comes first,
           -- ordered as the nest edges order them) and ends no earlier
           coalesce(max(c.end_ts) over (partition by c.rank, c.pid, c.tid order by c.ts, c.end_ts desc, c.id
                                        rows between unbounded preceding and 1 preceding) >= c.end_ts,
                    false) as nested_in_gemm
    from gemm_calls c left join forward_of f on f.rank = c.rank and f.id = c.id and f.choice = 1
),
grouped as (  -- shapes are parsed once per distinct shape, not per call
    select rank, name, base, is_backward, input_dims, input_type, nested_in_gemm,
           count(*) as count, sum(subtree_ns) as kernel_ns
    from calls
    group by all
),
shaped as (
    select *, try_cast(input_dims as bigint[][]) as dims, try_cast(input_type as varchar[]) as types
    from grouped
),
operands as (
    select *,
           -- A, B and bias as the op's signature places them
           case when base in ('addmm', 'baddbmm') then dims[2] else dims[1] end as a,
           case when base in ('addmm', 'baddbmm') then dims[3] else dims[2] end as b,
           case when base in ('addmm', 'baddbmm') then dims[1] when base = 'linear' then dims[3] end as bias_dims
    from shaped
),
sized as (
    select *,
           case
               when a is null or b is null or len(a) = 0 or len(b) = 0 then null
               when base in ('bmm', 'baddbmm') then a[1]
               when base = 'matmul' and len(b) >= 3
                   then greatest(dims_numel(list_slice(a, 1, len(a) - 2)), dims_numel(list_slice(b, 1, len(b) - 2)))
               else 1
           end as batch,
           case
               when a is null or b is null or len(a) = 0 or len(b) = 0 then null
               when base in ('bmm', 'baddbmm') then a[2]
               when base in ('matmul', 'linear') and len(a) = 1 then 1
               when base = 'matmul' and len(b) >= 3 then a[-2]
               when base in ('matmul', 'linear') then dims_numel(list_slice(a, 1, len(a) - 1))
               else a[1]
           end as m,
           case
               when a is null or b is null or len(a) = 0 or len(b) = 0 then null
               when base = 'linear' then b[1]
               when len(b) = 1 then 1
               else b[-1]
           end as n,
           case
               when a is null or b is null or len(a) = 0 or len(b) = 0 then null
               else a[-1]
           end as k
    from operands
),
costed as (
    select *,
           if(is_backward, 2 * (2 * batch * m * n * k), 2 * batch * m * n * k + if(adds_bias, batch * m * n, 0))
               as flops,
           (list_sum(list_transform(range(1, len(dims) + 1),
                                   lambda i: if(len(dims[i]) > 0, dims_numel(dims[i]) * dtype_bytes(types[i]), 0)))
               + batch * m * n * dtype_bytes(types[if(base in ('addmm', 'baddbmm'), 2, 1)]))::bigint as bytes
    from (select *, not is_backward and coalesce(len(bias_dims) > 0, false) as adds_bias from sized)
),
select rank, name, json(input_dims)::varchar as input_dims, json(input_type)::varchar as input_type,
       nested_in_gemm, adds_bias as bias,
       batch, m, n, k, count,
       flops / 1e9 as gflops_per_call,
       kernel_ns / 1e3 as kernel_total_us,
       kernel_ns / count / 1e3 as kernel_mean_us,
       count * flops / nullif(kernel_ns, 0) / 1e3 as tflops_per_s,
       bytes as bytes_per_call,
       flops / nullif(bytes, 0) as arithmetic_intensity,
       count * bytes / nullif(kernel_ns, 0) / 1e3 as tb_per_s
from costed
order by rank, kernel_total_us desc, name, input_dims, nested_in_gemm
