-- question: Which arrows does the all-ranks timeline draw, and where do their two ends sit?
-- inputs: edges, placed_slices (rank, id, pid, tid, ts, end_ns of every slice placed), path_runs (the critical
--   path's runs, queries/export/timeline_path_runs.sql: rank, window_start_ns, start_ns and the first and last
--   segments with an event: first_event_id, first_event_start_ns, first_event_end_ns, last_event_id, ...), $base
--   (ns, the file's base time), $arrows (edges: the launch and sync arrows; path: the critical path's, which wait
--   for its walk while the others are computed)
-- columns:
--   cat: launch, sync or critical_path
--   src_pid: pid of the start's slice
--   src_tid: tid of the start's slice
--   src_ts: µs text, the start (at or before the end)
--   dst_pid: pid of the end's slice
--   dst_tid: tid of the end's slice
--   dst_ts: µs text, the end
--   forward: false where no start inside the first slice precedes an end inside the second (the writer leaves
--     those out and counts them)
-- notes: Arrows: launch and sync edges whose two events are both on the timeline; along the critical path, from
--   the last event of a run on one track to the first event of the next run (a launch, a sync, a hand-over between
--   threads). Within a track the path goes from a call to its children and back, which the path's own track shows
--   as one slice per run: an arrow there would be drawn over the track it stays on, and a CPU-bound inference trace
--   has a path of nearly every call (SD3.5, 58 MB: 279k such arrows, 110 between tracks, and nearly half the file
--   when they were drawn). Every arrow runs
--   forward in time, from the end of one piece of work to the start of the next: a path arrow from the end of
--   its segment to the start of the next segment; an edge arrow from the end of its first slice (or the end of the
--   second, if that comes first) to the same moment or the start of the second slice, whichever is later. A
--   viewer binds each end to the innermost slice enclosing it on its track (Catapult: closed intervals, the
--   earlier slice on a tie, ends computed in floating-point ms), so each end is moved 1 ns into its window
--   (segment ∩ slice, or the slice where a gap segment lies before its GPU op) and kept 1 ns off the window's
--   edges: never on a boundary that two slices share, nor in a child that starts where the segment ends.
-- Each arrow's two slices are joined one after the other, the first through a materialized CTE: joined in one step,
-- DuckDB could pair every two slices of a rank first and then keep those an edge joins (with a `--step` of the A100
-- trainer: 163M pairs, 2.2 s, where the edges' 6.9k arrows need 14k lookups)
with
edge_starts as materialized (
    select e.rank, e.kind as cat, e.dst, s.pid as src_pid, s.tid as src_tid, s.ts as src_lo, s.end_ns as src_hi
    from edges e
    join placed_slices s on s.rank = e.rank and s.id = e.src
    where e.kind in ('launch', 'sync') and $arrows = 'edges'
),
edge_arrows as (
    select x.rank, x.cat, 0 as sort, x.src_pid, x.src_tid, x.src_lo, x.src_hi,
           least(x.src_hi, d.end_ns) as src_at,
           d.pid as dst_pid, d.tid as dst_tid, d.ts as dst_lo, d.end_ns as dst_hi,
           greatest(d.ts, least(x.src_hi, d.end_ns)) as dst_at
    from edge_starts x
    join placed_slices d on d.rank = x.rank and d.id = x.dst
),
path_moves as (
    select rank, last_event_id as event_id, last_event_start_ns as start_ns, last_event_end_ns as end_ns,
           lead(first_event_id) over w as next_event, lead(first_event_start_ns) over w as next_start,
           lead(first_event_end_ns) over w as next_end
    from path_runs
    where first_event_id is not null
    window w as (partition by rank, window_start_ns order by start_ns)
),
path_starts as materialized (
    select m.*, s.pid as src_pid, s.tid as src_tid, s.ts as src_ts, s.end_ns as src_end
    from path_moves m
    join placed_slices s on s.rank = m.rank and s.id = m.event_id
    where m.next_event <> m.event_id and $arrows = 'path'
),
path_arrows as (
    select m.rank, 'critical_path' as cat, 1 as sort,
           m.src_pid, m.src_tid,
           -- the segment's part of its slice; the whole slice where they share no time (a gap before a GPU op)
           case when greatest(m.start_ns, m.src_ts) < least(m.end_ns, m.src_end) then greatest(m.start_ns, m.src_ts)
                else m.src_ts end as src_lo,
           case when greatest(m.start_ns, m.src_ts) < least(m.end_ns, m.src_end) then least(m.end_ns, m.src_end)
                else m.src_end end as src_hi,
           m.end_ns as src_at,
           d.pid as dst_pid, d.tid as dst_tid,
           case when greatest(m.next_start, d.ts) < least(m.next_end, d.end_ns) then greatest(m.next_start, d.ts)
                else d.ts end as dst_lo,
           case when greatest(m.next_start, d.ts) < least(m.next_end, d.end_ns) then least(m.next_end, d.end_ns)
                else d.end_ns end as dst_hi,
           m.next_start as dst_at
    from path_starts m
    join placed_slices d on d.rank = m.rank and d.id = m.next_event
    where m.src_pid <> d.pid or m.src_tid <> d.tid
),
placed as (
    select cat, sort, rank, src_pid, src_tid, dst_pid, dst_tid,
           case when src_hi - src_lo >= 2 then least(src_hi - 1, greatest(src_lo + 1, src_at - 1))
                else src_lo + (src_hi - src_lo) // 2 end as src_ns,
           case when dst_hi - dst_lo >= 2 then least(dst_hi - 1, greatest(dst_lo + 1, dst_at + 1))
                else dst_lo + (dst_hi - dst_lo) // 2 end as dst_ns
    from (from edge_arrows union all by name from path_arrows)
)
select cat, src_pid, src_tid,
       format('{}.{:03d}', (src_ns - $base) // 1000, (src_ns - $base) % 1000) as src_ts,
       dst_pid, dst_tid,
       format('{}.{:03d}', (dst_ns - $base) // 1000, (dst_ns - $base) % 1000) as dst_ts,
       src_ns <= dst_ns as forward
from placed
order by sort, rank, src_ns, dst_ns, src_pid, src_tid, dst_pid, dst_tid
