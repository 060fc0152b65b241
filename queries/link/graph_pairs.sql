-- question: Which launch of which captured graph could each replayed GPU op be?
-- inputs: graph_replayed, captured_launches
-- includes: lib/categories
-- columns:
--   rank: rank
--   id: events.id of the replayed GPU op
--   launch: events.id of its graph launch call
--   capture_file: the capture trace
--   graph: the captured graph in it
--   position: the captured launch's index in the graph
--   match: name (paired by kernel name and occurrence), position (by index, kinds agreeing) or category (by the
--     category and its occurrence)
-- notes: Every replayed op against every captured graph of its rank (graph_choices.sql picks one graph per launch).
--   A graph all of whose kernel launches name their kernel (HIP) pairs the n-th replayed GPU op of a name with the
--   graph's n-th launch of that name, so an op missing on one side shifts nothing else; a graph whose launches name
--   no kernel (CUDA) pairs by index, the kinds (kernel, memcpy, memset) having to agree, where the launch ran on
--   one stream. On several streams start order interleaves the streams (and a replay runs a branch on whichever
--   stream: tests/data/gpu's fork graph ran the side stream's branch on the main stream), so there the n-th
--   replayed op of a category (kernel_category) pairs with the graph's n-th launch under an op of that category
--   (op_category of its owner). captured_launches is
--   capture_launches.sql's result over the capture traces, ranks as the replay's (tracekit.link.graph_capture).
with captured as (
    select *, if(kind = 'kernel', kernel_name, kind) as match_name,
           bool_and(kind <> 'kernel' or kernel_name is not null)
               over (partition by rank, capture_file, graph) as named,
           if(kind = 'kernel', op_category(coalesce(op_name, '')), 'memcpy/memset') as category
    from captured_launches
),
by_category as (
    select *, row_number() over (partition by rank, capture_file, graph, category order by position)::integer
                  as category_occurrence
    from captured where not named
),
named as (
    select *, row_number() over (partition by rank, capture_file, graph, match_name order by position)::integer
                  as occurrence
    from captured where named
)
select r.rank, r.id, r.launch, c.capture_file, c.graph, c.position, 'name' as match
from graph_replayed r
join named c on c.rank = r.rank and c.match_name = r.match_name and c.occurrence = r.occurrence
union all
select r.rank, r.id, r.launch, c.capture_file, c.graph, c.position, 'position'
from graph_replayed r
join captured c on c.rank = r.rank and c.position = r.position and c.kind = r.kind
where not c.named and r.streams = 1
union all
select r.rank, r.id, r.launch, c.capture_file, c.graph, c.position, 'category'
from graph_replayed r
join by_category c on c.rank = r.rank and c.category = r.category and c.category_occurrence = r.category_occurrence
where r.streams > 1
