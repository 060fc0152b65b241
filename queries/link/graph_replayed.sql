-- question: Which GPU ops did each CUDA/HIP graph launch replay, in what order?
-- inputs: events, edges
-- includes: lib/categories
-- columns:
--   rank: rank
--   id: events.id of the replayed GPU op
--   launch: events.id of the graph launch call (its name holds GraphLaunch)
--   kind: kernel, memcpy or memset
--   match_name: what the op is matched on by name: the kernel's name, or the kind for a memcpy or memset
--   position: index among the launch's GPU ops, from 0, in start order (then id)
--   occurrence: 1 for the launch's first GPU op of that match_name, 2 for the second, ...
--   gpu_ops: GPU ops the launch replayed
--   streams: streams the launch's GPU ops ran on
--   category: the GPU op's category (kernel_category in lib/categories.sql)
--   category_occurrence: 1 for the launch's first GPU op of that category, 2 for the second, ... (in start order)
-- notes: The replay side of graph-capture matching (graph_pairs.sql); its GPU ops share the launch call's
--   correlation, so they hang off it by launch edges.
with replayed as (
    select g.rank, g.id, l.src as launch, g.kind, if(g.kind = 'kernel', g.name, g.kind) as match_name, g.ts,
           g.stream, kernel_category(g.name, g.kind) as category
    from events g
    join edges l on l.kind = 'launch' and l.rank = g.rank and l.dst = g.id
    join events c on c.rank = l.rank and c.id = l.src
    where g.kind in ('kernel', 'memcpy', 'memset') and c.name like '%GraphLaunch%'
)
select rank, id, launch, kind, match_name,
       (row_number() over (partition by rank, launch order by ts, id) - 1)::integer as position,
       row_number() over (partition by rank, launch, match_name order by ts, id)::integer as occurrence,
       count(*) over (partition by rank, launch) as gpu_ops,
       count(distinct stream) over (partition by rank, launch) as streams, category,
       row_number() over (partition by rank, launch, category order by ts, id)::integer as category_occurrence
from replayed
