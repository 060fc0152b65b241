-- question: How many arithmetic operations and tensor bytes does each GPU compute node do (the num_ops and
--   tensor_size of a Chakra compute node, which ASTRA-sim's roofline model runs on)?
-- inputs: events, edges, graph_kernels, ranks, device_peaks, op_perf
-- includes: lib/categories, lib/launches, lib/peaks
-- columns:
--   rank: rank
--   id: events.id of the GPU op (its Chakra node id): a kernel, memcpy or memset that is not communication
--   op_id: events.id of the op whose model gives the numbers (null: from the measured duration)
--   op_name: that op's name
--   model: the op_perf family of that op (GEMM, CONV_fwd, Normalization, ...), or `measured` for the fallback
--   num_ops: operations (a multiply-add counts 2)
--   tensor_size: bytes read and written
--   inferred: for `measured` rows the note the node carries (its numbers come from its duration, not its shapes)
-- notes: One op model: the numbers are op_perf's (FLOPs and bytes per call, every family it models, formulas in
--   docs/perf_models.md), matched to each call by its name, Input Dims, Input type and Concrete Inputs (GEMM rows:
--   without Concrete Inputs, as op_perf groups them). A GPU op gets the numbers of the innermost op above its
--   launch call that op_perf models (aten::linear → aten::addmm: addmm's), shared among all the GPU ops that op
--   owns this way by their measured durations (equal shares when all last 0): a GEMM's cuBLAS memset gets its
--   sliver, the arithmetic intensity of every share is the op's. GPU ops that no modelled op owns (no launch
--   call in the trace, or an op op_perf does not model or cannot read) get numbers from their duration:
--   num_ops = duration × the device's fp32 matrix peak, tensor_size = duration × its HBM bandwidth (device_peaks,
--   the rank's device): a roofline configured with that peak and bandwidth runs the node for its measured
--   duration. A rank whose device is not in the peaks table gets no fallback (null: ASTRA-sim's roofline mode
--   then stops at the node).
with
modelled_shapes as materialized (
    select distinct on (rank, name, input_dims, input_type, concrete_inputs, category = 'GEMM')
           rank, name, input_dims, input_type, concrete_inputs, category, gflops_per_call * 1e9 as flops,
           bytes_per_call as bytes
    from op_perf
    where gflops_per_call is not null and bytes_per_call is not null
),
modelled_calls as materialized (
    select e.rank, e.id, e.name, e.ts, coalesce(e.dur, 0) as dur, m.category, m.flops, m.bytes
    from (select rank, id, name, ts, dur, json(input_dims)::varchar as input_dims,
                 json(input_type)::varchar as input_type, json(concrete_inputs)::varchar as concrete_inputs
          from events where kind = 'cpu_op' and input_dims is not null) e
    join modelled_shapes m on m.rank = e.rank and m.name = e.name and m.input_dims = e.input_dims
                          and m.input_type = e.input_type
                          and (m.category = 'GEMM' or m.concrete_inputs is not distinct from e.concrete_inputs)
    qualify row_number() over (partition by e.rank, e.id order by m.category = 'GEMM' desc) = 1
),
owner as (  -- each launch call's innermost modelled op: the latest-starting (then shortest) modelled ancestor
    select a.rank, a.call_id, c.id as op_id, c.name, c.category, c.flops, c.bytes
    from launch_op_ancestors() a
    join modelled_calls c on c.rank = a.rank and c.id = a.op_id
    qualify row_number() over (partition by a.rank, a.call_id order by c.ts desc, c.dur, c.id desc) = 1
),
compute_ops as (
    select g.rank, g.id, g.dur, g.call_id
    from gpu_ops() g
    where gpu_timeline_category(g.name, g.kind) <> 'communication'
),
shared as (
    select g.rank, g.id, o.op_id, o.name as op_name, o.category as model,
           o.flops * if(sum(g.dur) over op > 0, g.dur / sum(g.dur) over op, 1 / count(*) over op) as num_ops,
           o.bytes * if(sum(g.dur) over op > 0, g.dur / sum(g.dur) over op, 1 / count(*) over op) as tensor_size
    from compute_ops g
    join owner o on o.rank = g.rank and o.call_id = g.call_id
    window op as (partition by g.rank, o.op_id)
),
fallback_peaks as (
    select d.rank, p.matrix_tflops, p.hbm_tb_per_s, d.device
    from rank_devices() d join device_peaks p on p.device = d.device and p.dtype = 'fp32'
)
select rank, id, op_id, op_name, model, round(num_ops)::bigint as num_ops, round(tensor_size)::bigint as tensor_size,
       null as inferred
from shared
union all
select g.rank, g.id, null, null, 'measured',
       round(g.dur * p.matrix_tflops * 1e3)::bigint, round(g.dur * p.hbm_tb_per_s * 1e3)::bigint,
       'num_ops, tensor_size: from the measured duration at the ' || p.device || ' fp32 peak and HBM bandwidth'
from compute_ops g
anti join shared s on s.rank = g.rank and s.id = g.id
join fallback_peaks p on p.rank = g.rank
order by rank, id
