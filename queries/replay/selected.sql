-- question: Which events does one what-if selector pick, and what part of their time does it change?
-- outputs: replay_selected
-- inputs: events, edges
-- includes: lib/categories
-- columns:
--   rank: rank
--   id: events.id
--   part: gpu (the GPU op's duration), cpu (the host event's time, its whole subtree on the thread) or op (the
--     host event's time and the GPU work launched from inside it)
-- notes: Parameters $selector (kernel, op, category, cpu) and $pattern. Names match case-insensitively:
--   kernel:P the GPU ops whose name contains P; op:P the cpu_ops, user annotations and Python functions whose name
--   contains P; cpu:P any host event whose name contains P; category:N the GPU ops of gpu_timeline_category N
--   (computation, communication, memcpy) and the cpu_ops of op_category N (GEMM, attention, ...).
select rank, id, 'gpu' as part from events
where $selector = 'kernel' and kind in ('kernel', 'memcpy', 'memset') and contains(lower(name), lower($pattern))
union all
select rank, id, 'op' from events
where $selector = 'op' and kind in ('cpu_op', 'user_annotation', 'python_function')
  and contains(lower(name), lower($pattern))
union all
select rank, id, 'cpu' from events
where $selector = 'cpu'
  and kind in ('trace', 'user_annotation', 'python_function', 'cpu_op', 'runtime', 'driver', 'overhead', 'other')
  and contains(lower(name), lower($pattern))
union all
select rank, id, 'gpu' from events
where $selector = 'category' and kind in ('kernel', 'memcpy', 'memset')
  and gpu_timeline_category(name, kind) = lower($pattern)
union all
select rank, id, 'op' from events
where $selector = 'category' and kind = 'cpu_op' and lower(op_category(name)) = lower($pattern)
