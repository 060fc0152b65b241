-- question: How much of each rank's GPU time does each ownership rule own, and how much does nothing own?
-- inputs: events, edges, graph_kernels
-- includes: lib/launches
-- columns:
--   rank: rank
--   attribution: the rule that owned the GPU ops (kernel_by_op): capture, op, annotation, python_frame,
--     graph_launch, none
--   unowned_reason: for none, why (no launch call in the trace; launch call outside every op, annotation and
--     Python frame); null otherwise
--   gpu_ops: GPU ops (kernels, memcpys, memsets)
--   time_ms: ms, their summed durations
--   percent: percent of the rank's summed GPU op durations (the denominator of every op share)
-- notes: The denominator of the op sheets' shares (op_summary, op_by_shape, op_categories, kernel_by_op) is all of
--   the rank's GPU op time; this says how it divides among the rules, so `none` is the unowned percentage.
with owners as (select * from gpu_op_owners())
select rank, attribution, unowned_reason, count(*) as gpu_ops, sum(dur) / 1e6 as time_ms,
       100 * sum(dur) / nullif(sum(sum(dur)) over (partition by rank), 0) as percent
from owners
group by rank, attribution, unowned_reason
order by rank, array_position(['capture', 'op', 'annotation', 'python_frame', 'graph_launch', 'none'], attribution), unowned_reason
