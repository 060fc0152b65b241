-- about: the critical path of time windows (table macros), shared by critical_path and the analyses that sum it.
-- inputs: events, edges
-- includes: lib/steps, lib/names
-- macros:
--   critical_path_segments(windows): for each window of the relation named `windows` (rank, window_id,
--     start_ns, end_ns), the chain of events that bounds it, as segments that tile the window exactly:
--     rank, window_id, position (1 = earliest), event_id (null: no event), kind, name, category (cpu, sync_wait,
--     launch, unexplained_gpu_wait, compute, communication, memcpy, memset, kernel_to_kernel_gap, idle), carried_by
--     (cpu or gpu: where the event that owns the segment ran; null for idle), inferred (true: a wait after the GPU
--     op an inferred edge, sync_inferred or stream_wait_inferred, says was waited for), start_ns, end_ns,
--     duration_ns.
--   step_critical_paths(): the segments of each step's window (step_or_trace_windows(): the whole trace of a rank
--     without steps; a window ends when its last work ends, GPU included) summed per event and category, in no
--     order, with only what the analyses that sum them read (it is held for the connection's life: 149k rows for
--     OWLv2's 297k segments): rank, step, event_id, category (an ENUM of the category names, in their text order:
--     `category::varchar` for text), duration_ns (summed), segments, window_start_ns, window_end_ns.
-- notes:
-- The walk. Every CPU event (cpu_op, user_annotation, python_function, runtime, driver, overhead) and GPU op
-- (kernel, memcpy, memset) has a start state S and an end state E. Each state has one predecessor, chosen once
-- for all states with joins and window functions: the one that gated it, i.e. the candidate that became ready
-- last.
--   E of a CPU event: its last child (nest edges) or, for a host call that waited on the GPU (sync edges, recorded,
--     or sync_inferred where none was recorded, from a GPU op that ended while the call ran), that GPU op's E;
--     ready at their ends; a tie goes to the GPU op. The time
--     from the child's end is the event's own CPU time; from the GPU op's end it is sync_wait. With neither, S of
--     the same event, and the whole event is CPU time. A thread_wait_inferred edge into the event's end (a call
--     that returned just after another host thread's point: run_backward) wins when that point is later than
--     these: its S or E, the time from it sync_wait (inferred).
--   S of a CPU event: E of the previous sibling (the previous top-level event of its thread when it has no
--     parent): the time between is the parent's own CPU time (no event when top-level); else S of the parent
--     (the parent's CPU time before its first child); else nothing (idle back to the window start). A
--     thread_wait_inferred edge into the event's start (its thread idle until another thread's point released
--     it) wins when that point is later: the time from it is sync_wait (inferred), the path goes on over there.
--   E of a GPU op: its S; the op's duration is compute, communication or memcpy (gpu_timeline_category of
--     lib/categories), or memset.
--   S of a GPU op: the latest-ready of E of the previous op on its stream (the gap is kernel_to_kernel_gap), E of
--     its launch call (launch: call end to op start), E of a GPU op it waits on through a sync edge or a
--     stream_wait_inferred edge (sync_wait); ties prefer stream, then sync, then launch; any of the three over 25
--     µs before the op started is unexplained_gpu_wait (_critical_path_gpu_wait). A predecessor still
--     running when the op started (the launch call, or an overlapping op on the stream) is entered at its S
--     instead, the time up to the op's start being that predecessor's; such a launch call is ready at the op's
--     start, or at its own start when it went on to wait for the GPU (a blocking copy queues its op before it
--     waits). Nothing (no launch call found, the first op on its stream): unexplained_gpu_wait back to the window
--     start, owned by the op.
-- From the event that ends last inside the window (idle after it), the walk follows predecessors back to the
-- window start or to a state with none. Its position is a cursor, the time up to which the window is explained:
-- a step into a state at time t moves it to max(window start, min(cursor, t)) and covers what it passed, so the
-- segments tile the window exactly (a predecessor later than the cursor, from sub-µs overlaps in the trace,
-- covers nothing).
-- Set-based, without a step per state: states are laid out in lanes, a CPU thread or a stream, in time order
-- (ties: on a thread the Euler-tour order of its call tree, on a stream op order), where the predecessor of a
-- state is nearly always the state just before it. A run is a stretch of a lane the walk goes down state by
-- state; it ends at a jump: a state whose predecessor is elsewhere (a launch, a sync, an overlapping op,
-- sub-µs improper nesting) or nowhere. The jumps are chained (each to the jump that ends the run it leads into),
-- and a recursive CTE moves every window's walk along that chain, one run per iteration (iterations = jumps on
-- the path, not states). The runs are then expanded back into their states (cut at the window start, where the
-- lane's time passes it), and the cursor at each state is the running minimum of the states' times.
-- The Euler order needs each CPU event's last descendant (the call trees, finished in numpy: below).

-- In four macros: the events, the call trees, the lanes (the states with their predecessors, laid out in lanes; these
-- three independent of the windows), the walk of each window (_critical_path_walk; critical_path_segments numbers and
-- names its segments, and step_critical_paths walks the step windows for the sums, which need neither: on a 53 MB
-- inference trace whose path runs through 297k segments, the sort and the names were 0.17 of its 0.46 CPU s). A
-- connection that materializes the events, the call trees and the lanes (catalog.SHARED_TABLE_MACROS) runs each as a
-- statement of its own, whose sorts and joins are freed before the next one starts (in one statement they set a
-- report's peak memory, bench/RESULTS.md); the states go straight into the lanes' sort (a table of them, 316k rows on
-- OWLv2, was written and read again for nothing: the two statements took 6% more instructions, for the same peak), and
-- are CTEs of the lanes' macro, not a macro of their own (DuckDB binds a table macro where it is defined and again
-- where it is used: 7.6 ms of each walking connection's definitions, for the one use); elsewhere they expand into one.
-- A CTE that only reads one of them is `not materialized`: DuckDB materializes a CTE read more than once, which copied
-- the shared table (the lanes of MI300X resnet x4, 393k rows: the critical path 0.57 -> 0.49 s, its peak 230 -> 180
-- MB). Only integer keys and times go through the sorts and joins; names and kinds are joined to the segments at the
-- end.
-- _critical_path_category(name): a segment's category as an ENUM of the category names in their text order (a
-- sort or tie on it is the text's): one byte a row through the states, lanes and walk, where the names as text were
-- copied, checked and hashed row by row (the analyses that show a category turn it back into text)
create or replace macro _critical_path_category(name) as
    name::enum('communication', 'compute', 'cpu', 'idle', 'kernel_to_kernel_gap', 'launch', 'memcpy', 'memset',
               'sync_wait', 'unexplained_gpu_wait');

-- _critical_path_gpu_wait(category, waited_ns): the category of a GPU op's wait for a predecessor that let it go
-- WAITED_NS before it started (its stream's previous op: kernel_to_kernel_gap; its launch call: launch; an op it
-- waited on: sync_wait), or unexplained_gpu_wait over 25 µs (the lag bound of link/sync_inferred_edges.sql): the
-- latest of what the trace says the op waited for let it go that long before it started, so what held it back is
-- not in the trace (work begun before the profile or cut from it, another process, a missing record, a slow
-- start). Ops start a few µs after they are free to: at most 24 µs on the shared traces' paths but for these
-- (docs/critical_path.md)
create or replace macro _critical_path_gpu_wait(category, waited_ns) as
    _critical_path_category(if(waited_ns > 25000, 'unexplained_gpu_wait', category));

-- _critical_path_name(name): an event's name as the path's sums by name show it: every ProfilerStep#N one name (the
-- regexp only on the names that can match), no event "(no event)"
create or replace macro _critical_path_name(name) as
    case when starts_with(name, 'ProfilerStep#') then regexp_replace(name, '^ProfilerStep#\d+$', 'ProfilerStep#N')
         else coalesce(name, '(no event)') end;

-- _critical_path_events(): the events the walk goes through; lane: the event's thread or stream; cpu_kind_order: a
-- CPU kind's place among events that start and end together (outer kinds first)
create or replace macro _critical_path_events() as table
    select e.rank, e.id, e.ts, e.ts + coalesce(e.dur, 0) as end_ns,
           e.kind in ('kernel', 'memcpy', 'memset') as on_gpu,
           if(e.kind in ('kernel', 'memcpy', 'memset'), hash('stream', e.device, e.stream),
              hash('thread', e.pid, e.tid)) as lane,
           list_position(['user_annotation', 'python_function', 'cpu_op', 'runtime', 'driver', 'overhead'], e.kind)
               as cpu_kind_order,
           -- the category of each distinct GPU op name, looked up (its regexes planned and run once per name)
           _critical_path_category(
               case when e.kind = 'memset' then 'memset'
                    when e.kind in ('kernel', 'memcpy') then replace(c.timeline_category, 'computation', 'compute')
                    else 'cpu' end) as category
    from events e
    left join gpu_op_categories() c on c.name is not distinct from e.name and c.kind = e.kind
    where e.ts is not null
      and e.kind in ('cpu_op', 'user_annotation', 'python_function', 'runtime', 'driver', 'overhead',
                     'kernel', 'memcpy', 'memset');

-- _critical_path_calls(): the CPU events with their place in their thread's call tree. The body selects each CPU event
-- with its parent (nest edges) in pre-order: numbered across threads and ranks (rank, thread, then start, longest
-- first, outer kind first: the order nest edges are built in). tracekit/engine/call_trees.py finishes it (pre: the
-- pre-order number; prev_sibling, prev_sibling_end, next_sibling_pre: the event's siblings, the children of one parent
-- or the top-level events of one thread, before and after it; last_pre: its last descendant's pre, itself for a
-- leaf): its two window sorts and a recursive CTE of one iteration per tree level took 0.2-0.35 s of one core on
-- OWLv2, on the walk's chain of statements (bench/RESULTS.md). The connection always computes it into a table. In
-- thread order, the states made from it reach the lanes' sort nearly sorted, which DuckDB sorts in about half the
-- time (MI300X resnet x4: 0.33 -> 0.23 s, more than this sort costs).
create or replace macro _critical_path_calls() as table
    with
    cp_events as not materialized (from _critical_path_events()),
    cp_parent as materialized (
        select n.rank, n.dst as id, n.src as parent
        from edges n
        semi join cp_events p on p.rank = n.rank and p.id = n.src and not p.on_gpu
        where n.kind = 'nest'
    )
    select e.rank, e.id, e.lane, e.ts, e.end_ns, p.parent
    from cp_events e
    left join cp_parent p on p.rank = e.rank and p.id = e.id
    where not e.on_gpu
    order by e.rank, e.lane, e.ts, e.end_ns desc, e.cpu_kind_order, e.id;

-- _critical_path_lanes(): every state with its predecessor (below), in lanes, in time order (ties in Euler order).
-- A run is a stretch of a lane the walk goes down state by state (each state's predecessor is the state just before
-- it); it ends at a jump: a state whose predecessor is elsewhere (another lane: a launch, a sync; an overlap; sub-µs
-- improper nesting) or nowhere, and leads to the state to_state (its lane, position and time: to_lane, to_pos,
-- to_tau).
create or replace macro _critical_path_lanes() as table
    with
    cp_events as not materialized (from _critical_path_events()),
    cp_cpu as not materialized (from _critical_path_calls()),
    cp_last_child as (
        select rank, parent as id, id as child, end_ns as child_end
        from cp_cpu
        where next_sibling_pre is null and parent is not null
    ),
    -- The edges the walk follows (launch, stream, sync), with both ends' times. Each end is looked up by an
    -- equi-join of two relations behind a materialized fence: with all three in one join, a planner may pair the
    -- events by a time comparison before matching them by id (DuckDB 2.0.1 did: a near-cross product of the
    -- events, unbounded memory).
    cp_link_dst as materialized (
        select x.rank, x.kind, x.src, x.dst, g.ts as dst_ts, g.end_ns as dst_end, g.on_gpu as dst_on_gpu
        from edges x
        join cp_events g on g.rank = x.rank and g.id = x.dst
        where x.kind in ('launch', 'stream', 'sync', 'sync_inferred', 'stream_wait_inferred')
    ),
    cp_links as materialized (
        select l.*, p.ts as src_ts, p.end_ns as src_end, p.on_gpu as src_on_gpu, p.category as src_category,
               p.lane as src_lane
        from cp_link_dst l
        join cp_events p on p.rank = l.rank and p.id = l.src
    ),
    -- GPU ops a host call waited for (recorded or inferred sync edges): the latest to end while the call ran
    cp_host_waits as materialized (
        select rank, dst as id, arg_max(src, struct_pack(src_end, src)) as gpu_id, max(src_end) as gpu_end,
               arg_max(kind = 'sync_inferred', struct_pack(src_end, src)) as inferred
        from cp_links
        where kind in ('sync', 'sync_inferred') and src_on_gpu and not dst_on_gpu
          and src_end > dst_ts and src_end <= dst_end
        group by rank, dst
    ),
    -- Every state with its predecessor (next_id, next_at_end), who owns the time since the predecessor (and
    -- elsewhere_lane: that event's lane where it is not the state's, a launch call still running when its op
    -- started), its lane (thread or stream) and its place there (sort keys):
    -- on a thread the Euler-tour order of the call tree, in which a state's predecessor is almost always the
    -- state just before it; on a stream, start and end of each op in stream order.
    -- waits between host threads (thread_wait_inferred): the other thread's point that released the waiting
    -- thread, into the start (into_end false) or the end of the waiting event
    cp_thread_waits as materialized (
        select t.rank, t.dst as id, ends_with(t.subkind, '_end') as into_end, t.src,
               starts_with(t.subkind, 'end') as src_at_end,
               case when starts_with(t.subkind, 'end') then p.end_ns else p.ts end as src_t
        from edges t join cp_events p on p.rank = t.rank and p.id = t.src
        where t.kind = 'thread_wait_inferred'
    ),
    cp_cpu_end as (
        select e.rank, e.id, true as at_end,
               case when e.thread_waited then e.tw_src when e.waited then e.gpu_id when e.child is not null then e.child
                    else e.id end as next_id,
               case when e.thread_waited then e.tw_src_at_end else e.waited or e.child is not null end as next_at_end,
               e.id as segment_event,
               _critical_path_category(if(e.waited or e.thread_waited, 'sync_wait', 'cpu')) as category,
               e.thread_waited or (e.waited and e.inferred) as inferred,
               null::ubigint as elsewhere_lane, e.end_ns as tau, e.lane, e.last_pre as k1, 1 as k2, -e.pre as k3
        from (
            select *,
                   tw_src is not null and tw_src_t >= greatest(ts, coalesce(child_end, ts),
                                                               if(waited, gpu_end, ts)) as thread_waited
            from (
                select e.rank, e.id, e.ts, e.end_ns, e.lane, e.pre, e.last_pre, c.child, c.child_end, w.gpu_id,
                       w.inferred, w.gpu_end,
                       w.gpu_id is not null and (c.child is null or w.gpu_end >= c.child_end) as waited,
                       tw.src as tw_src, tw.src_at_end as tw_src_at_end, tw.src_t as tw_src_t
                from cp_cpu e
                left join cp_last_child c on c.rank = e.rank and c.id = e.id
                left join cp_host_waits w on w.rank = e.rank and w.id = e.id
                left join cp_thread_waits tw on tw.rank = e.rank and tw.id = e.id and tw.into_end
            )
        ) e
    ),
    -- thread waits into an event's start, and whether the other thread released it later than its own thread did
    -- (few: the parent's start is looked up for these only, not for every event)
    cp_start_waits as materialized (
        select tw.rank, tw.id, tw.src, tw.src_at_end,
               coalesce(tw.src_t >= coalesce(s.prev_sibling_end, p.ts, tw.src_t), false) as thread_waited
        from cp_thread_waits tw
        join cp_cpu s on s.rank = tw.rank and s.id = tw.id
        left join cp_events p on p.rank = s.rank and p.id = s.parent
        where not tw.into_end
    ),
    cp_cpu_start as (
        select s.rank, s.id, false as at_end,
               if(s.thread_waited, s.tw_src, coalesce(s.prev_sibling, s.parent)) as next_id,
               if(s.thread_waited, s.tw_src_at_end, s.prev_sibling is not null) as next_at_end,
               -- a hand-over's lag belongs to the waiting thread: the enclosing event, else the event resumed
               if(s.thread_waited, coalesce(s.parent, s.id), s.parent) as segment_event,
               _critical_path_category(case when s.thread_waited then 'sync_wait'
                                            when s.prev_sibling is null and s.parent is null then 'idle'
                                            else 'cpu' end) as category,
               s.thread_waited as inferred,
               null as elsewhere_lane,
               s.ts as tau, s.lane, s.pre as k1, 0 as k2, 0 as k3
        from (
            select s.*, tw.src as tw_src, tw.src_at_end as tw_src_at_end,
                   coalesce(tw.thread_waited, false) as thread_waited
            from cp_cpu s
            left join cp_start_waits tw on tw.rank = s.rank and tw.id = s.id
        ) s
    ),
    cp_gpu as materialized (
        select *, row_number() over (partition by rank, lane order by ts, id) as k
        from cp_events where on_gpu
    ),
    cp_gpu_end as (
        select rank, id, true as at_end, id as next_id, false as next_at_end, id as segment_event,
               category, false as inferred, null as elsewhere_lane, end_ns as tau, lane, k as k1, 1 as k2, 0 as k3
        from cp_gpu
    ),
    -- what a GPU op's start may wait for; ready = when it let the op go
    cp_gpu_candidates as (
        select rank, dst as id, src as pred, 1 as priority,
               case when src_end <= dst_ts then src_end else dst_ts end as ready,
               src_end <= dst_ts as pred_at_end,
               case when src_end <= dst_ts then dst else src end as segment_event,
               if(src_end <= dst_ts, _critical_path_gpu_wait('kernel_to_kernel_gap', dst_ts - src_end), src_category)
                   as category,
               false as inferred, null::ubigint as elsewhere_lane
        from cp_links
        where kind = 'stream' and src_ts <= dst_ts
        union all
        select rank, dst, src, 2, src_end, true, dst, _critical_path_gpu_wait('sync_wait', dst_ts - src_end),
               kind = 'stream_wait_inferred', null
        from cp_links
        where kind in ('sync', 'stream_wait_inferred') and dst_on_gpu and src_on_gpu and src_end <= dst_ts
        union all
        -- a launch call still running when its op started held the op back until then, unless the call went on
        -- to wait for the GPU (a blocking copy): such a call queues its op and then waits, so it is ready from its
        -- start, and an op still running on the stream then holds the copy back instead
        select l.rank, l.dst, l.src, 3,
               case when l.src_end <= l.dst_ts then l.src_end when w.id is not null then l.src_ts else l.dst_ts end,
               l.src_end <= l.dst_ts,
               case when l.src_end <= l.dst_ts then l.dst else l.src end,
               if(l.src_end <= l.dst_ts, _critical_path_gpu_wait('launch', l.dst_ts - l.src_end),
                  _critical_path_category('cpu')),
               false, if(l.src_end <= l.dst_ts, null, l.src_lane)
        from cp_links l
        left join cp_host_waits w on w.rank = l.rank and w.id = l.src
        where l.kind = 'launch' and l.src_ts <= l.dst_ts
    ),
    cp_gpu_start as (
        -- an op with no predecessor (no launch call found, the first on its stream) owns the time back to the
        -- window start, unexplained: what launched it is not in the trace
        select g.rank, g.id, false as at_end, c.pred as next_id, c.pred_at_end as next_at_end,
               coalesce(c.segment_event, g.id) as segment_event,
               coalesce(c.category, _critical_path_category('unexplained_gpu_wait')) as category,
               coalesce(c.inferred, false) as inferred,
               c.elsewhere_lane,
               g.ts as tau, g.lane, g.k as k1, 0 as k2, 0 as k3
        from cp_gpu g
        left join (
            select * from cp_gpu_candidates
            qualify row_number() over (partition by rank, id order by ready desc, priority, pred) = 1
        ) c on c.rank = g.rank and c.id = g.id
    ),
    -- each lane numbered in (rank, lane) order, and the three tie keys packed into one (k1 < 2^30, 0 <= -k3 < 2^32:
    -- event counts): the lanes' sort key (lane_no, tau, k) is then 23 bytes, which DuckDB sorts as a fixed-size key
    -- (with its row index, up to 32 bytes), where (rank, lane, tau, k1, k2, k3), 46, took a variable-size one that
    -- is compared through memcmp (OWLv2: the lanes 1148M -> 1018M instructions; the same order, the same pos)
    cp_lane_numbers as materialized (
        select rank, lane, (row_number() over (order by rank, lane))::int as lane_no
        from (select distinct rank, lane from cp_events)
    ),
    -- states as integers: 2 * event id for the start, 2 * event id + 1 for the end
    cp_states as not materialized (
        select s.rank, 2 * s.id + s.at_end::int as state, 2 * s.next_id + s.next_at_end::int as next_state,
               s.segment_event, s.category, s.inferred, s.elsewhere_lane, s.tau, s.lane, n.lane_no,
               s.k1 * 8589934592 + s.k2 * 4294967296 + s.k3 as k
        from (
            select * from cp_cpu_end
            union all select * from cp_cpu_start
            union all select * from cp_gpu_end
            union all select * from cp_gpu_start
        ) s
        join cp_lane_numbers n on n.rank = s.rank and n.lane = s.lane
    )
    select * exclude (lane_pred, first_in_lane) replace (if(first_in_lane, null, prev_tau) as prev_tau),
           next_state is null or first_in_lane or next_state is distinct from lane_pred as is_jump
    from (
        select rank, lane, state, next_state, segment_event, category, inferred, elsewhere_lane, tau,
               row_number() over lane_order as pos, lag(state) over lane_order as lane_pred,
               lag(tau) over lane_order as prev_tau,
               lag(lane_no) over lane_order is distinct from lane_no as first_in_lane
        from cp_states
        window lane_order as (order by lane_no, tau, k)
    );

-- _critical_path_walk(windows): the segments of critical_path_segments, without position, kind, name and carried_by,
-- with the walk's run the segment was walked in (iteration: 0 for the run that ends the window, counting back; -1 for
-- idle after the window's last event), lane: the thread or stream of that run (null: that idle), and event_lane: the
-- thread or stream of event_id (a run on a stream gives the launch call's time before its first op started to that
-- call, on its thread)
create or replace macro _critical_path_walk(windows) as table
    with recursive
    cp_windows as materialized (
        select rank, window_id, start_ns, end_ns from query_table(windows)
    ),
    cp_events as not materialized (select rank, id, ts, end_ns, on_gpu from _critical_path_events()),
    cp_lanes as not materialized (from _critical_path_lanes()),
    -- where a walk may start: not on a thread of Python frames alone, whose frames last until the profiler stops
    -- them (vLLM's usage reporter: the whole path of the MI300X decode capture trace was its 59 ms of waiting)
    cp_start_events as not materialized (
        select e.rank, e.id, e.ts, e.end_ns, e.on_gpu
        from _critical_path_events() e
        -- (a thread's lane as _critical_path_events names it)
        anti join (select rank, hash('thread', pid, tid) as lane from frames_only_threads()) f
            on f.rank = e.rank and f.lane = e.lane
    ),
    -- the jumps (few: the recursion walks from jump to jump, not through every state)
    cp_jumps as materialized (
        select j.rank, j.lane, j.pos, j.tau, j.next_state, t.lane as to_lane, t.pos as to_pos, t.tau as to_tau
        from (select rank, lane, pos, tau, next_state from cp_lanes where is_jump) j
        left join (select rank, state, lane, pos, tau from cp_lanes) t on t.rank = j.rank and t.state = j.next_state
    ),
    -- and the jump that ends the run each jump leads into: the last jump at or before where it lands
    cp_jump_chain as materialized (
        select j.*, b.pos as to_bottom_pos
        from cp_jumps j
        asof left join (select rank, lane, pos from cp_jumps) b
            on b.rank = j.rank and b.lane = j.to_lane and b.pos <= j.to_pos
    ),
    -- where each walk starts: the event that ends last inside the window (the outermost on a tie), and the jump
    -- that ends its first run
    cp_last_end as (
        select w.rank, w.window_id, w.start_ns as window_start, w.end_ns as window_end,
               case when e.end_ns > w.start_ns then e.end_ns end as first_end
        from cp_windows w
        asof left join (select rank, end_ns from cp_start_events) e on e.rank = w.rank and e.end_ns <= w.end_ns
    ),
    cp_starts as (
        select l.rank, l.window_id, l.window_start, l.window_end, l.first_end,
               arg_max(e.id, struct_pack(neg_ts := -e.ts, cpu := not e.on_gpu, neg_id := -e.id)) as first_id
        from cp_last_end l
        left join cp_start_events e on e.rank = l.rank and e.end_ns = l.first_end
        group by l.rank, l.window_id, l.window_start, l.window_end, l.first_end
    ),
    cp_first_runs as (
        select s.*, x.lane, x.pos as top_pos, b.pos as bottom_pos
        from cp_starts s
        join cp_lanes x on x.rank = s.rank and x.state = 2 * s.first_id + 1
        asof join (select rank, lane, pos from cp_jumps) b on b.rank = x.rank and b.lane = x.lane and b.pos <= x.pos
    ),
    cp_limits as (
        select rank, count(*) + 2 as max_iterations from cp_jumps group by rank
    ),
    -- one row per run on the walk: its lane, the positions it goes down from and to, and the cursor at its top
    -- (how far back the window is explained); each iteration moves every window's walk by one run
    cp_walk(rank, window_id, window_start, max_iterations, iteration, lane, top_pos, bottom_pos, cursor) as (
        select f.rank, f.window_id, f.window_start, m.max_iterations, 0, f.lane, f.top_pos, f.bottom_pos,
               f.first_end
        from cp_first_runs f join cp_limits m on m.rank = f.rank
        union all
        select w.rank, w.window_id, w.window_start, w.max_iterations, w.iteration + 1, j.to_lane, j.to_pos,
               j.to_bottom_pos, greatest(w.window_start, least(w.cursor, j.tau, j.to_tau))
        from cp_walk w
        join cp_jump_chain j on j.rank = w.rank and j.lane = w.lane and j.pos = w.bottom_pos
        where w.cursor > w.window_start and j.next_state is not null and w.iteration < w.max_iterations
    ),
    -- the first state at or after the window start of each lane a window's walk goes down: a run crossing the
    -- window start is cut there
    cp_cuts as (
        select w.rank, w.window_id, w.lane, c.pos as cut_pos
        from (select distinct rank, window_id, window_start, lane from cp_walk where cursor > window_start) w
        asof left join (select rank, lane, tau, pos from cp_lanes) c
            on c.rank = w.rank and c.lane = w.lane and w.window_start <= c.tau
    ),
    -- the runs expanded into their states, in walk order, down to the cut (low_pos); the cursor at each state is the
    -- running minimum of the states' times (clamped at the window start), and each state's step covers [next
    -- cursor, its cursor). A run's cursor (cp_walk) is that minimum at its top, and a lane's times fall going
    -- down it: so the cursor at a state is the lesser of its run's and its time, and the next state's (next
    -- cursor) that of the state below, or at a run's last state the next run's cursor (no sort of the states in
    -- walk order: SD3.5 inference, 297k states on the path, 0.09 s)
    cp_runs as (
        select w.*, lead(w.cursor) over (partition by w.rank, w.window_id order by w.iteration) as next_run_cursor,
               greatest(w.bottom_pos, coalesce(c.cut_pos, w.top_pos + 1)) as low_pos
        from cp_walk w
        left join cp_cuts c on c.rank = w.rank and c.window_id = w.window_id and c.lane = w.lane
        where w.cursor > w.window_start
    ),
    -- each run's states, looked up by position (numbered across lanes and ranks) in two equi-joins whose build
    -- sides stay small: the whole blocks of 64 positions inside a run by block, its other positions (its ends, a
    -- short run whole) one by one. One join by position hashed every state on the path (SD3.5: 274k, 32 of
    -- timeline_path_runs' 135 ms; these two take 11); by block alone, a block crossed by many short runs (a path
    -- that changes lanes every few states) would compare each of its states with each of those runs
    cp_run_blocks as not materialized (
        select rank, window_id, window_start, iteration, lane, cursor, next_run_cursor, low_pos, top_pos,
               (low_pos + 63) // 64 as first_block, (top_pos + 1) // 64 as end_block
        from cp_runs
    ),
    cp_path as (
        select p.rank, p.window_id, p.window_start, p.iteration, p.lane, p.cursor, p.next_run_cursor, p.low_pos,
               s.pos, s.segment_event, s.category, s.inferred, s.elsewhere_lane, s.tau, s.prev_tau
        from (select *, unnest(range(first_block, end_block)) as block from cp_run_blocks) p
        join cp_lanes s on s.pos // 64 = p.block
        union all
        select p.rank, p.window_id, p.window_start, p.iteration, p.lane, p.cursor, p.next_run_cursor, p.low_pos,
               s.pos, s.segment_event, s.category, s.inferred, s.elsewhere_lane, s.tau, s.prev_tau
        from (select *, unnest(if(first_block < end_block,
                                  range(low_pos, first_block * 64) || range(end_block * 64, top_pos + 1),
                                  range(low_pos, top_pos + 1))) as pos
              from cp_run_blocks) p
        join cp_lanes s on s.pos = p.pos
    ),
    cp_cursors as (
        select rank, window_id, window_start, iteration, lane, segment_event, category, inferred,
               -- the segment's event is on the run's lane, but for a launch call's time before its op started
               if(segment_event is null, null, coalesce(elsewhere_lane, lane)) as segment_lane,
               greatest(window_start, least(cursor, tau)) as cursor,
               if(pos > low_pos, greatest(window_start, least(cursor, prev_tau)), next_run_cursor) as next_cursor
        from cp_path
    ),
    cp_segments as (
        select rank, window_id, iteration, lane, segment_event, segment_lane, category, inferred,
               coalesce(next_cursor, window_start) as start_ns, cursor as end_ns
        from cp_cursors
        union all
        -- after the last event of the window (or all of a window without events)
        select rank, window_id, -1, null, null, null, _critical_path_category('idle'), false,
               coalesce(first_end, window_start), window_end
        from cp_starts
    )
    select rank, window_id, iteration, lane, segment_event as event_id, segment_lane as event_lane, category,
           inferred, start_ns, end_ns, end_ns - start_ns as duration_ns
    from cp_segments
    where end_ns > start_ns;

create or replace macro critical_path_segments(windows) as table
    select s.rank, s.window_id, s.position, s.event_id, e.kind, e.name, s.category::varchar as category,
           case when s.category = 'idle' then null when e.kind in ('kernel', 'memcpy', 'memset') then 'gpu'
                else 'cpu' end as carried_by,
           s.inferred, s.start_ns, s.end_ns, s.duration_ns
    from (
        select *, row_number() over (partition by rank, window_id order by start_ns, end_ns) as position
        from _critical_path_walk(windows)
    ) s
    left join events e on e.rank = s.rank and e.id = s.event_id;

create or replace macro step_critical_paths() as table
    with windows as materialized (
        select rank, window_id, step, start_ns, work_end_ns as end_ns from step_or_trace_windows()
    )
    select p.rank, w.step, p.event_id, p.category, p.duration_ns, p.segments, w.start_ns as window_start_ns,
           w.end_ns as window_end_ns
    from (
        select rank, window_id, event_id, category, sum(duration_ns)::bigint as duration_ns, count(*) as segments
        from _critical_path_walk('windows')
        group by rank, window_id, event_id, category
    ) p
    join windows w on w.rank = p.rank and w.window_id = p.window_id;
