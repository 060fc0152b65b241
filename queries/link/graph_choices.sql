-- question: Which captured graph did each graph launch replay?
-- inputs: graph_replayed, graph_pairs, captured_launches
-- columns:
--   rank: rank
--   launch: events.id of the graph launch call
--   capture_file: the chosen graph's capture trace (null: no captured graph of the rank pairs with any of its ops)
--   graph: the chosen graph
--   gpu_ops: GPU ops the launch replayed
--   launches: launch calls of the chosen graph
--   matched: replayed GPU ops paired with a launch of it
--   graphs_fitting: captured graphs that fit as well as the chosen one
-- notes: The graph that leaves the fewest ops unpaired on both sides (replayed ops with no launch, launches with no
--   replayed op); among equals the first capture file and graph. Graphs of one model captured at several batch sizes
--   can fit a launch equally where the capture names no kernels (CUDA): graphs_fitting > 1 says so.
with sizes as (
    select rank, capture_file, graph, count(*) as launches from captured_launches group by all
),
launches as (select rank, launch, any_value(gpu_ops) as gpu_ops from graph_replayed group by all),
scores as (
    select p.rank, p.launch, p.capture_file, p.graph, count(*) as matched, any_value(s.launches) as launches
    from graph_pairs p
    join sizes s on s.rank = p.rank and s.capture_file = p.capture_file and s.graph = p.graph
    group by all
),
ranked as (
    select l.rank, l.launch, l.gpu_ops, s.capture_file, s.graph, s.launches, s.matched,
           2 * s.matched - s.launches - l.gpu_ops as score
    from launches l left join scores s on s.rank = l.rank and s.launch = l.launch
)
select rank, launch, capture_file, graph, gpu_ops, launches, coalesce(matched, 0) as matched,
       (count(*) filter (where capture_file is not null) over (partition by rank, launch, score))::integer
           as graphs_fitting
from ranked
qualify row_number() over (partition by rank, launch order by score desc nulls last, capture_file, graph) = 1
