-- prelude: the critical path of time windows (table macro), shared by critical_path and critical_path_summary.
--   critical_path_segments(windows): for each window of the relation named `windows` (rank, window_id,
--     start_ns, end_ns), the chain of events that bounds it, as segments that tile the window exactly:
--     rank, window_id, position (1 = earliest), event_id (null: no event), kind, name, category, start_ns,
--     end_ns, duration_ns.
--
-- The walk. Every CPU event (cpu_op, user_annotation, python_function, runtime, driver, overhead) and GPU op
-- (kernel, memcpy, memset) has a start state S and an end state E. Each state has one predecessor, chosen once
-- for all states with joins and window functions: the one that gated it, i.e. the candidate that became ready
-- last.
--   E of a CPU event: its last child (nest edges) or, for a host call that waited on the GPU (sync edges from a GPU
--     op that ended while the call ran), that GPU op's E; ready at their ends; a tie goes to the GPU op. The time
--     from the child's end is the event's own CPU time; from the GPU op's end it is sync_wait. With neither, S of
--     the same event, and the whole event is CPU time.
--   S of a CPU event: E of the previous sibling (the previous top-level event of its thread when it has no
--     parent): the time between is the parent's own CPU time (no event when top-level); else S of the parent
--     (the parent's CPU time before its first child); else nothing (idle back to the window start).
--   E of a GPU op: its S; the op's duration is gpu_compute, gpu_communication (NCCL/RCCL kernels) or gpu_memcpy.
--   S of a GPU op: the latest-ready of E of the previous op on its stream (the gap is kernel_to_kernel_gap), E of
--     its launch call (launch_overhead: call end to op start), E of a GPU op it waits on through a sync edge
--     (sync_wait); ties prefer stream, then sync, then launch. A predecessor still running when the op started
--     (the launch call, or an overlapping op on the stream) is entered at its S instead, the time up to the op's
--     start being that predecessor's. Nothing: idle.
-- From the event that ends last inside the window (idle after it), the walk follows predecessors back to the
-- window start or to a state with none. Its position is a cursor, the time up to which the window is explained:
-- a step into a state at time t moves it to max(window start, min(cursor, t)) and covers what it passed, so the
-- segments tile the window exactly (a predecessor later than the cursor, from sub-µs overlaps in the trace,
-- covers nothing).
-- Set-based, without a step per state: states are laid out in lanes (a CPU thread in the Euler-tour order of its
-- call tree, where the predecessor of a state is nearly always the state just before it; a stream in op order).
-- A run is a stretch of a lane the walk goes down state by state; it ends at a jump: a state whose predecessor
-- is elsewhere (a launch, a sync, an overlap), nowhere, or across a window start. A recursive CTE moves every
-- window's walk by one whole run per iteration (iterations = jumps on the path, not states), then the runs are
-- expanded back into their states, and the cursor at each state is the running minimum of the states' times.
-- The Euler order needs each CPU event's last descendant, found one tree level per iteration.

create or replace macro critical_path_segments(windows) as table
    with recursive
    cp_windows as materialized (
        select rank, window_id, start_ns, end_ns from query_table(windows)
    ),
    cp_events as materialized (
        select rank, id, kind, name, pid, tid, device, stream, ts, ts + coalesce(dur, 0) as end_ns,
               kind in ('kernel', 'memcpy', 'memset') as on_gpu,
               case when kind in ('kernel', 'memcpy', 'memset') then
                   case gpu_timeline_category(name, kind)
                       when 'communication' then 'gpu_communication'
                       when 'memcpy' then 'gpu_memcpy'
                       else 'gpu_compute'
                   end
               else 'cpu' end as category
        from events
        where ts is not null
          and kind in ('cpu_op', 'user_annotation', 'python_function', 'runtime', 'driver', 'overhead',
                       'kernel', 'memcpy', 'memset')
    ),
    cp_parent as materialized (
        select n.rank, n.dst as id, n.src as parent
        from edges n
        semi join cp_events p on p.rank = n.rank and p.id = n.src
        where n.kind = 'nest'
    ),
    -- CPU events with their pre-order index on their thread (the order nest edges are built in: start, longest
    -- first, outer kind first) and their siblings (children of one parent; top-level events of one thread)
    cp_cpu as materialized (
        select *, lag(id) over sibling_order as prev_sibling,
               lead(pre) over sibling_order as next_sibling_pre,
               count(*) over (partition by rank, pid, tid) as thread_events
        from (
            select e.rank, e.id, e.pid, e.tid, hash('thread', e.pid, e.tid) as lane, e.ts, e.end_ns, p.parent,
                   row_number() over (
                       partition by e.rank, e.pid, e.tid
                       order by e.ts, e.end_ns desc,
                                list_position(['user_annotation', 'python_function', 'cpu_op', 'runtime', 'driver',
                                               'overhead'], e.kind), e.id) as pre
            from cp_events e
            left join cp_parent p on p.rank = e.rank and p.id = e.id
            where not e.on_gpu
        )
        window sibling_order as (
            partition by rank, parent, case when parent is null then pid end, case when parent is null then tid end
            order by pre)
    ),
    -- pre-order index of each CPU event's last descendant (itself for a leaf), one tree level per iteration
    cp_last_descendant(rank, id, last_pre) as (
        select rank, id, coalesce(next_sibling_pre - 1, thread_events) from cp_cpu where parent is null
        union all
        select c.rank, c.id, coalesce(c.next_sibling_pre - 1, d.last_pre)
        from cp_last_descendant d
        join cp_cpu c on c.rank = d.rank and c.parent = d.id
    ),
    cp_last_child as (
        select rank, parent as id, id as child from cp_cpu where next_sibling_pre is null and parent is not null
    ),
    -- GPU ops a host call waited for: the latest to end while the call ran
    cp_host_waits as (
        select s.rank, s.dst as id, arg_max(g.id, struct_pack(g.end_ns, g.id)) as gpu_id
        from edges s
        join cp_events g on g.rank = s.rank and g.id = s.src and g.on_gpu
        join cp_events h on h.rank = s.rank and h.id = s.dst and not h.on_gpu
        where s.kind = 'sync' and g.end_ns > h.ts and g.end_ns <= h.end_ns
        group by s.rank, s.dst
    ),
    -- Every state with its predecessor (next_id, next_at_end), the predecessor's time (= the lower end of the
    -- time the step covers), who owns that time, its lane (thread or stream) and its place there (sort keys):
    -- on a thread the Euler-tour order of the call tree, in which a state's predecessor is almost always the
    -- state just before it; on a stream, start and end of each op in stream order.
    cp_cpu_end as (
        select e.rank, e.id, true as at_end,
               case when e.waited then e.gpu_id when e.child is not null then e.child else e.id end as next_id,
               e.waited or e.child is not null as next_at_end,
               case when e.waited then e.gpu_end when e.child is not null then e.child_end else e.ts end as lower_ns,
               e.id as segment_event,
               case when e.waited then 'sync_wait' else 'cpu' end as category,
               e.end_ns as tau, o.lane, d.last_pre as k1, 1 as k2, -o.pre as k3
        from (
            select e.rank, e.id, e.ts, e.end_ns, c.child, ch.end_ns as child_end, w.gpu_id, g.end_ns as gpu_end,
                   w.gpu_id is not null and (c.child is null or g.end_ns >= ch.end_ns) as waited
            from cp_events e
            left join cp_last_child c on c.rank = e.rank and c.id = e.id
            left join cp_events ch on ch.rank = c.rank and ch.id = c.child
            left join cp_host_waits w on w.rank = e.rank and w.id = e.id
            left join cp_events g on g.rank = w.rank and g.id = w.gpu_id
            where not e.on_gpu
        ) e
        join cp_cpu o on o.rank = e.rank and o.id = e.id
        join cp_last_descendant d on d.rank = e.rank and d.id = e.id
    ),
    cp_cpu_start as (
        select s.rank, s.id, false as at_end,
               coalesce(s.prev_sibling, s.parent) as next_id,
               s.prev_sibling is not null as next_at_end,
               case when s.prev_sibling is not null then b.end_ns else p.ts end as lower_ns,
               s.parent as segment_event,
               case when s.prev_sibling is null and s.parent is null then 'idle' else 'cpu' end as category,
               s.ts as tau, s.lane, s.pre as k1, 0 as k2, 0 as k3
        from cp_cpu s
        left join cp_events b on b.rank = s.rank and b.id = s.prev_sibling
        left join cp_events p on p.rank = s.rank and p.id = s.parent
    ),
    cp_gpu as materialized (
        select *, hash('stream', device, stream) as lane,
               row_number() over (partition by rank, device, stream order by ts, id) as k
        from cp_events where on_gpu
    ),
    cp_gpu_end as (
        select rank, id, true as at_end, id as next_id, false as next_at_end, ts as lower_ns, id as segment_event,
               category, end_ns as tau, lane, k as k1, 1 as k2, 0 as k3
        from cp_gpu
    ),
    -- what a GPU op's start may wait for; ready = when it let the op go
    cp_gpu_candidates as (
        select g.rank, g.id, p.id as pred, 1 as priority,
               case when p.end_ns <= g.ts then p.end_ns else g.ts end as ready,
               p.end_ns <= g.ts as pred_at_end,
               case when p.end_ns <= g.ts then p.end_ns else p.ts end as lower_ns,
               case when p.end_ns <= g.ts then g.id else p.id end as segment_event,
               case when p.end_ns <= g.ts then 'kernel_to_kernel_gap' else p.category end as category
        from edges x
        join cp_events g on g.rank = x.rank and g.id = x.dst
        join cp_events p on p.rank = x.rank and p.id = x.src
        where x.kind = 'stream' and p.ts <= g.ts
        union all
        select g.rank, g.id, q.id, 2, q.end_ns, true, q.end_ns, g.id, 'sync_wait'
        from edges x
        join cp_events g on g.rank = x.rank and g.id = x.dst and g.on_gpu
        join cp_events q on q.rank = x.rank and q.id = x.src and q.on_gpu
        where x.kind = 'sync' and q.end_ns <= g.ts
        union all
        select g.rank, g.id, l.id, 3,
               case when l.end_ns <= g.ts then l.end_ns else g.ts end,
               l.end_ns <= g.ts,
               case when l.end_ns <= g.ts then l.end_ns else l.ts end,
               case when l.end_ns <= g.ts then g.id else l.id end,
               case when l.end_ns <= g.ts then 'launch_overhead' else 'cpu' end
        from edges x
        join cp_events g on g.rank = x.rank and g.id = x.dst
        join cp_events l on l.rank = x.rank and l.id = x.src
        where x.kind = 'launch' and l.ts <= g.ts
    ),
    cp_gpu_start as (
        select g.rank, g.id, false as at_end, c.pred as next_id, c.pred_at_end as next_at_end, c.lower_ns,
               c.segment_event, coalesce(c.category, 'idle') as category,
               g.ts as tau, g.lane, g.k as k1, 0 as k2, 0 as k3
        from cp_gpu g
        left join (
            select * from cp_gpu_candidates
            qualify row_number() over (partition by rank, id order by ready desc, priority, pred) = 1
        ) c on c.rank = g.rank and c.id = g.id
    ),
    -- states as integers: 2 * event id for the start, 2 * event id + 1 for the end
    cp_states as materialized (
        select rank, 2 * id + at_end::int as state, 2 * next_id + next_at_end::int as next_state, lower_ns,
               segment_event, category, tau, lane, k1, k2, k3
        from (
            select * from cp_cpu_end
            union all select * from cp_cpu_start
            union all select * from cp_gpu_end
            union all select * from cp_gpu_start
        )
    ),
    -- A run is a stretch of a lane the walk goes down state by state (each state's predecessor is the state just
    -- before it and no later); it ends at a "jump": a state whose predecessor is elsewhere (another lane: a launch,
    -- a sync; an overlap) or nowhere, or where the stretch would cross a window start. The recursion then moves
    -- a whole run per iteration, and the runs are expanded back into states afterwards.
    cp_lanes as materialized (
        select *, row_number() over lane_order as pos,
               lag(state) over lane_order as lane_pred, lag(tau) over lane_order as pred_tau
        from cp_states
        window lane_order as (partition by rank, lane order by k1, k2, k3)
    ),
    cp_window_crossings as (
        select distinct l.rank, l.state
        from cp_lanes l
        join cp_windows w on w.rank = l.rank and l.pred_tau < w.start_ns and l.tau >= w.start_ns
    ),
    cp_runs as materialized (
        select *, max(case when is_jump then pos end) over (
                      partition by rank, lane order by pos rows between unbounded preceding and current row)
                  as bottom_pos
        from (
            select l.*, l.next_state is null or l.next_state is distinct from l.lane_pred or l.pred_tau > l.tau
                        or c.state is not null as is_jump
            from cp_lanes l
            left join cp_window_crossings c on c.rank = l.rank and c.state = l.state
        )
    ),
    -- from any state: the end of its run, that state's time, and the state the walk jumps to from there
    cp_run_ends as materialized (
        select s.rank, s.state, s.lane, s.pos as top_pos, s.bottom_pos, b.tau as bottom_tau,
               b.next_state as jump_to, b.lower_ns as jump_to_tau
        from cp_runs s
        join cp_runs b on b.rank = s.rank and b.lane = s.lane and b.pos = s.bottom_pos
    ),
    -- where each walk starts: the event that ends last inside the window (the outermost on a tie)
    cp_starts as (
        select w.rank, w.window_id, w.start_ns as window_start, w.end_ns as window_end,
               arg_max(e.id, struct_pack(e.end_ns, neg_ts := -e.ts, cpu := not e.on_gpu, neg_id := -e.id))
                   as first_id,
               max(e.end_ns) as first_end
        from cp_windows w
        left join cp_events e on e.rank = w.rank and e.end_ns <= w.end_ns and e.end_ns > w.start_ns
        group by w.rank, w.window_id, w.start_ns, w.end_ns
    ),
    cp_limits as (
        select rank, count(*) filter (where is_jump) + 2 as max_iterations from cp_runs group by rank
    ),
    -- one row per run on the walk: the state it starts from and the cursor there (how far back the window is
    -- explained); each iteration moves every window's walk by one run
    cp_walk(rank, window_id, window_start, max_iterations, iteration, top, cursor) as (
        select s.rank, s.window_id, s.window_start, m.max_iterations, 0, 2 * s.first_id + 1, s.first_end
        from cp_starts s join cp_limits m on m.rank = s.rank
        where s.first_id is not null
        union all
        select w.rank, w.window_id, w.window_start, w.max_iterations, w.iteration + 1, r.jump_to,
               greatest(w.window_start, least(w.cursor, r.bottom_tau, r.jump_to_tau))
        from cp_walk w
        join cp_run_ends r on r.rank = w.rank and r.state = w.top
        where w.cursor > w.window_start and r.jump_to is not null and w.iteration < w.max_iterations
    ),
    -- the runs expanded into their states, in walk order; the cursor at each state is the running minimum of
    -- the states' times (clamped at the window start), and each state's step covers [next cursor, its cursor)
    cp_path as (
        select w.rank, w.window_id, w.window_start, w.iteration, r.lane,
               unnest(range(r.top_pos, r.bottom_pos - 1, -1)) as pos
        from cp_walk w
        join cp_run_ends r on r.rank = w.rank and r.state = w.top
        where w.cursor > w.window_start
    ),
    cp_cursors as (
        select p.rank, p.window_id, p.window_start, p.iteration, p.pos, s.segment_event, s.category,
               greatest(p.window_start, min(s.tau) over walk_order) as cursor
        from cp_path p
        join cp_runs s on s.rank = p.rank and s.lane = p.lane and s.pos = p.pos
        where s.tau >= p.window_start
        window walk_order as (partition by p.rank, p.window_id order by p.iteration, p.pos desc
                              rows between unbounded preceding and current row)
    ),
    cp_segments as (
        select rank, window_id, segment_event, category,
               coalesce(lead(cursor) over (partition by rank, window_id order by iteration, pos desc), window_start)
                   as start_ns,
               cursor as end_ns
        from cp_cursors
        union all
        -- after the last event of the window (or all of a window without events)
        select rank, window_id, null, 'idle', coalesce(first_end, window_start), window_end
        from cp_starts
    )
    select s.rank, s.window_id,
           row_number() over (partition by s.rank, s.window_id order by s.start_ns, s.end_ns) as position,
           s.segment_event as event_id, e.kind, e.name, s.category, s.start_ns, s.end_ns,
           s.end_ns - s.start_ns as duration_ns
    from cp_segments s
    left join cp_events e on e.rank = s.rank and e.id = s.segment_event
    where s.end_ns > s.start_ns;
