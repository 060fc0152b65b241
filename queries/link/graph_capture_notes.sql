-- question: What of the graph replays could the capture not account for?
-- inputs: events, graph_replayed, graph_choices, graph_kernels, captured_launches
-- columns:
--   rank: rank
--   position: events.id the note is about (a replayed GPU op, or the graph launch call)
--   stage: capture
--   reason: graph_capture_unmatched, graph_capture_not_replayed, graph_capture_ambiguous, graph_capture_no_graph
--   detail: what and why
--   dropped: false (nothing is dropped: an unmatched op keeps its ownership without a capture)
-- notes: graph_capture_unmatched: a replayed GPU op no launch of the chosen graph pairs with (the counts differ, or
--   its kernel is not among the capture's); graph_capture_not_replayed: per launch, the chosen graph's launch calls
--   no replayed op paired with (one note per launch, counting them); graph_capture_ambiguous: several captured
--   graphs fit the launch equally; graph_capture_streams_interleaved: a launch on several streams paired by category
--   (graph_pairs.sql); graph_capture_no_graph: no captured graph of the rank pairs with any of its ops.
with chosen as (
    select ch.*, regexp_extract(ch.capture_file, '[^/\\]*$') as file_name, e.name as call_name
    from graph_choices ch join events e on e.rank = ch.rank and e.id = ch.launch
)
select r.rank, r.id as position, 'capture' as stage, 'graph_capture_unmatched' as reason,
       printf('%s %s (GPU op %d of %d of %s %d) matches no launch of captured graph %d of %s (%d launch calls, %d '
              'matched)', g.kind, g.name, r.position + 1, ch.gpu_ops, ch.call_name, r.launch, ch.graph, ch.file_name,
              ch.launches, ch.matched) as detail,
       false as dropped
from graph_replayed r
join chosen ch on ch.rank = r.rank and ch.launch = r.launch and ch.capture_file is not null
join events g on g.rank = r.rank and g.id = r.id
anti join graph_kernels k on k.rank = r.rank and k.id = r.id
union all
select rank, launch, 'capture', 'graph_capture_not_replayed',
       printf('%s %d: %d of the %d launch calls of captured graph %d of %s have no replayed GPU op (the capture '
              'launched more than the replay ran)', call_name, launch, launches - matched, launches, graph, file_name),
       false
from chosen where capture_file is not null and matched < launches
union all
select rank, launch, 'capture', 'graph_capture_ambiguous',
       printf('%s %d fits %d captured graphs equally (no kernel names to tell them apart); owned by the ops of '
              'graph %d of %s, whose shapes may be another''s', call_name, launch, graphs_fitting, graph, file_name),
       false
from chosen where graphs_fitting > 1
union all
select ch.rank, ch.launch, 'capture', 'graph_capture_streams_interleaved',
       printf('%s %d ran its %d GPU ops on %d streams, and captured graph %d of %s names no kernels: they are paired '
              'by category and order within it, so ops of one category on streams that ran side by side may hold '
              'one another''s op, shapes and module', ch.call_name, ch.launch, ch.gpu_ops, s.streams, ch.graph,
              ch.file_name),
       false
from chosen ch
join (select r.rank, r.launch, count(distinct g.stream) as streams
      from graph_replayed r join events g on g.rank = r.rank and g.id = r.id
      group by all having count(distinct g.stream) > 1) s on s.rank = ch.rank and s.launch = ch.launch
where exists (select 1 from graph_kernels k where k.rank = ch.rank and k.launch = ch.launch and k.match = 'category')
union all
select rank, launch, 'capture', 'graph_capture_no_graph',
       printf('%s %d (%d GPU ops): no captured graph of rank %d pairs with any of its GPU ops', call_name, launch,
              gpu_ops, rank),
       false
from chosen where capture_file is null
