-- about: training-step windows and GPU time inside time windows (table macros).
-- inputs: events, edges
-- includes: lib/launches, lib/iterations, lib/names
-- macros:
--   step_windows(): one row per rank and step: a ProfilerStep#N, from the CPU user_annotation of that name (a
--     cpu_op in legacy traces), or where a rank has none, a serving engine's iteration (lib/iterations.sql: the
--     engines' iteration annotations, else vLLM's execute_model frames; numbered 1, 2, ... in start order, nested
--     or overlapping markers folded into the earlier one):
--     rank, step (N), name, event_id, start_ns, end_ns (the CPU step), and the step's GPU window gpu_start_ns,
--     gpu_end_ns with gpu_window_source: 'gpu_annotation' where the trace has a gpu_annotation of the same name (its
--     span), else 'launches' (first start to last end of the GPU ops whose launch call starts inside the CPU step),
--     else null (gpu annotations are matched to ProfilerSteps only: iteration names repeat). Where a rank has two
--     CPU annotations of one ProfilerStep name, the step is the user_annotation, then the longest. Then the marker
--     that defined the step (iteration_marker), and what it says: phase (prefill, decode, mixed), batch_size
--     (sequences), tokens (null where the marker does not say; all three null for ProfilerSteps).
--   steady_steps(): step_metrics() with `used`: whether the warm-up rule keeps the step, per rank and phase (a
--     step whose window holds GPU work queued before the profiling window is left out, unless no step of its
--     rank and phase is complete: then all of them are used), and `basis` (complete_steps or all_steps).
--   step_breakdown(): step_windows() with the GPU time inside each CPU step window (gpu_time_in_windows), in ns.
--   frames_only_threads(): rank, pid, tid of each thread whose events are all Python frames, on a rank with other
--     events: such a thread (a tqdm monitor, a serving engine's usage reporter) waits beside the work, and its
--     frames last until the profiler stops them.
--   step_or_trace_windows(): rank, window_id, step, start_ns, end_ns, work_end_ns: the CPU step windows of ranks
--     with steps (window_id = step), work_end_ns the end of the step's last work (the CPU step's end or, when later,
--     the end of its GPU window); for a rank without steps one window (window_id -1, step null) from the first start
--     to the last end of its CPU events and GPU ops (work_end_ns = end_ns), leaving out frames_only_threads().
--   step_members(iterations_only := false): the step of every event that belongs to one (rank, id, step): what a
--     step's events are (see the comment above its definition); with iterations_only, of the serving iterations'
--     steps only (marker not profiler_step: a training trace then costs nothing).
--   step_events(of_step): the events of step N on every rank that has it (step_members()): rank, id.
--   step_metrics(): step_breakdown() in ms: the columns of the steps analysis, shared by steps and step_stats, and
--     `steady`: THE steady-state rule (step_stats' statistics, the report's Overview and the diff's verdicts use
--     these steps): a step whose window holds no GPU work queued before the profiling window (unlaunched_ns = 0);
--     on a rank (and serving phase) with no such step, every step of it.
--   gpu_time_in_windows(windows): GPU time inside each window of the relation named `windows` (a table or a CTE
--     of the calling query, with rank, window_id, start_ns, end_ns): the union of GPU-op intervals clipped to the
--     window, per category, in ns: computation_ns, communication_ns, memcpy_ns, busy_ns,
--     exposed_communication_ns (communication not overlapped by computation), exposed_memcpy_ns (memcpy not
--     overlapped by computation or communication), idle_ns (window length - busy), and unlaunched_ns: the union of
--     the GPU ops inside the window that have no launch call in the trace (left out of the above). GPU ops as in
--     TraceLens's gpu_timeline: gpu_ops() (lib/launches) with a launch call (work queued before the profiling
--     window has none), categories by gpu_timeline_category.
--     Union lengths without pairwise overlap joins: in start order, each interval adds what it extends beyond the
--     furthest end seen before it in the same (window, union).

create or replace macro step_windows() as table
    with step_markers as (
        select rank, id, kind, name, ts as start_ns, ts + dur as end_ns, iteration_marker(kind, name) as marker
        from events
        where kind in ('user_annotation', 'cpu_op', 'python_function') and dur is not null
          and iteration_marker(kind, name) is not null
        qualify iteration_precedence(marker) = min(iteration_precedence(marker)) over (partition by rank)
    ),
    profiler_steps as (
        select rank, id, name, start_ns, end_ns, marker,
               regexp_extract(name, '^ProfilerStep#(\d+)$', 1)::bigint as step
        from step_markers
        where marker = 'profiler_step'
        qualify row_number() over (partition by rank, name
                                   order by kind = 'user_annotation' desc, end_ns - start_ns desc, id) = 1
    ),
    -- a serving engine's iterations, numbered 1, 2, ... in start order; one nested in (or overlapping) an earlier
    -- one of the rank is part of it, not an iteration of its own
    iterations as (
        select rank, id, name, start_ns, end_ns, marker,
               row_number() over (partition by rank order by start_ns, id) as step
        from (select * from step_markers
              where marker <> 'profiler_step'
              qualify start_ns >= coalesce(max(end_ns) over (partition by rank order by start_ns, id
                                                             rows between unbounded preceding and 1 preceding),
                                           start_ns))
    ),
    step_annotations as (
        select * from profiler_steps
        union all
        select * from iterations
    ),
    gpu_annotations as (
        select rank, name, min(ts) as gpu_start_ns, max(ts + dur) as gpu_end_ns
        from events
        where kind = 'gpu_annotation' and regexp_matches(name, '^ProfilerStep#\d+$')
        group by rank, name
    ),
    launched as (
        select g.rank, c.ts as call_ns, g.start_ns, g.end_ns
        from gpu_ops() g
        join events c on c.rank = g.rank and c.id = g.call_id
    ),
    -- each launch call to the step it falls in: the last step starting at or before it, if it has not ended
    launch_spans as (
        select s.rank, s.step, min(g.start_ns) as gpu_start_ns, max(g.end_ns) as gpu_end_ns
        from launched g
        asof join step_annotations s on s.rank = g.rank and s.start_ns <= g.call_ns
        where g.call_ns < s.end_ns
        group by s.rank, s.step
    )
    select s.rank, s.step, s.name, s.id as event_id, s.start_ns, s.end_ns,
           coalesce(a.gpu_start_ns, l.gpu_start_ns) as gpu_start_ns,
           coalesce(a.gpu_end_ns, l.gpu_end_ns) as gpu_end_ns,
           case when a.rank is not null then 'gpu_annotation' when l.rank is not null then 'launches' end
               as gpu_window_source,
           s.marker, _iteration_phase(s.marker, s.name, s.counts) as phase,
           _iteration_batch_size(s.marker, s.name, s.counts) as batch_size,
           _iteration_tokens(s.marker, s.name, s.counts) as tokens
    from (select *, _vllm_counts(name) as counts from step_annotations) s
    left join gpu_annotations a on a.rank = s.rank and a.name = s.name and s.marker = 'profiler_step'
    left join launch_spans l on l.rank = s.rank and l.step = s.step;

create or replace macro gpu_time_in_windows(windows) as table
    with gtw_windows as (
        select rank, window_id, start_ns, end_ns from query_table(windows)
    ),
    gtw_ops as (
        select g.rank, g.start_ns, g.end_ns,
               case when g.call_id is null then 'unlaunched' else c.timeline_category end as category
        from gpu_ops() g
        left join gpu_op_categories() c on c.name is not distinct from g.name and c.kind = g.kind
        where g.dur > 0
    ),
    gtw_clipped as (
        select w.rank, w.window_id, greatest(o.start_ns, w.start_ns) as start_ns, least(o.end_ns, w.end_ns) as end_ns,
               o.category
        from gtw_windows w
        join gtw_ops o on o.rank = w.rank and o.start_ns < w.end_ns and o.end_ns > w.start_ns
    ),
    -- every interval joins each union it is part of: its own category, computation ∪ communication, and busy
    gtw_memberships as (
        select rank, window_id, start_ns, end_ns,
               unnest(case category
                          when 'computation' then ['computation', 'compute_or_comm', 'busy']
                          when 'communication' then ['communication', 'compute_or_comm', 'busy']
                          when 'memcpy' then ['memcpy', 'busy']
                          else ['unlaunched']
                      end) as union_name
        from gtw_clipped
    ),
    gtw_extensions as (
        select rank, window_id, union_name,
               greatest(0, end_ns - greatest(start_ns, coalesce(max(end_ns) over (
                   partition by rank, window_id, union_name order by start_ns, end_ns
                   rows between unbounded preceding and 1 preceding), start_ns))) as added_ns
        from gtw_memberships
    ),
    gtw_unions as (
        select rank, window_id,
               sum(added_ns) filter (where union_name = 'computation') as computation_ns,
               sum(added_ns) filter (where union_name = 'communication') as communication_ns,
               sum(added_ns) filter (where union_name = 'memcpy') as memcpy_ns,
               sum(added_ns) filter (where union_name = 'compute_or_comm') as compute_or_comm_ns,
               sum(added_ns) filter (where union_name = 'busy') as busy_ns,
               sum(added_ns) filter (where union_name = 'unlaunched') as unlaunched_ns
        from gtw_extensions
        group by rank, window_id
    )
    select w.rank, w.window_id,
           coalesce(u.computation_ns, 0)::bigint as computation_ns,
           coalesce(u.communication_ns, 0)::bigint as communication_ns,
           coalesce(u.memcpy_ns, 0)::bigint as memcpy_ns,
           coalesce(u.busy_ns, 0)::bigint as busy_ns,
           (coalesce(u.compute_or_comm_ns, 0) - coalesce(u.computation_ns, 0))::bigint as exposed_communication_ns,
           (coalesce(u.busy_ns, 0) - coalesce(u.compute_or_comm_ns, 0))::bigint as exposed_memcpy_ns,
           (w.end_ns - w.start_ns - coalesce(u.busy_ns, 0))::bigint as idle_ns,
           coalesce(u.unlaunched_ns, 0)::bigint as unlaunched_ns
    from gtw_windows w
    left join gtw_unions u on u.rank = w.rank and u.window_id = w.window_id;

create or replace macro step_breakdown() as table
    with sb_steps as materialized (select * from step_windows()),
    sb_windows as (select rank, step as window_id, start_ns, end_ns from sb_steps)
    select s.*, g.* exclude (rank, window_id)
    from sb_steps s
    join gpu_time_in_windows('sb_windows') g on g.rank = s.rank and g.window_id = s.step;

-- Each step with its metrics in ms: the columns of the steps analysis, shared by steps and step_stats.
create or replace macro step_metrics() as table
select rank, step, name, start_ns, end_ns,
       (end_ns - start_ns) / 1e6 as duration_ms,
       busy_ns / 1e6 as busy_ms,
       idle_ns / 1e6 as idle_ms,
       computation_ns / 1e6 as computation_ms,
       communication_ns / 1e6 as communication_ms,
       exposed_communication_ns / 1e6 as exposed_communication_ms,
       memcpy_ns / 1e6 as memcpy_ms,
       exposed_memcpy_ns / 1e6 as exposed_memcpy_ms,
       gpu_start_ns, gpu_end_ns,
       (gpu_end_ns - gpu_start_ns) / 1e6 as gpu_duration_ms,
       gpu_window_source,
       marker, phase, batch_size, tokens,
       unlaunched_ns,
       unlaunched_ns = 0 or count(*) filter (where unlaunched_ns = 0) over (partition by rank, phase) = 0 as steady
from step_breakdown();

create or replace macro frames_only_threads() as table
    select t.rank, t.pid, t.tid
    from (select rank, pid, tid, bool_and(kind = 'python_function') as frames_only
          from events where ts is not null group by all) t
    where t.frames_only
      and exists (select 1 from events o where o.rank = t.rank and o.ts is not null and o.kind <> 'python_function');

create or replace macro step_or_trace_windows() as table
    with sw_steps as materialized (
        select rank, step, start_ns, end_ns, greatest(end_ns, coalesce(gpu_end_ns, end_ns)) as work_end_ns
        from step_windows())
    select rank, step as window_id, step, start_ns, end_ns, work_end_ns from sw_steps
    union all
    select rank, -1, null, min(ts), max(ts + coalesce(dur, 0)), max(ts + coalesce(dur, 0))
    from (
        select e.rank, e.ts, e.dur
        from (from events
              where ts is not null
                and kind in ('cpu_op', 'user_annotation', 'python_function', 'runtime', 'driver', 'overhead', 'kernel',
                             'memcpy', 'memset')
                and rank not in (select rank from sw_steps)) e
        anti join frames_only_threads() f
            on f.rank = e.rank and f.pid is not distinct from e.pid and f.tid is not distinct from e.tid
    )
    group by rank;

-- step_members(): the step of every event that belongs to one (rank, id, step): THE definition of a step's events,
-- used by `tracekit run --step`, TraceDatabase.scoped(step=), `tracekit graph --step` and the diff's per-step
-- noise alike. Step N of a rank is its step_windows() row. An event belongs to it as follows, and to one step at
-- most (where windows overlap, to the one that started last at or before the event, if that one has not ended):
--   - a GPU op (kernel, memcpy, memset) with a launch call in the trace: the step of its launch call, wherever it
--     ran (work launched in step N that runs after the CPU step ends is still step N's);
--   - a gpu_annotation (a range projected on the GPU timeline): the step whose GPU window contains its start;
--   - every other event, host events and GPU ops without a launch call in the trace (queued before the profiling
--     window) alike: the step whose CPU window contains its start. The GPU ops queued before the window run at the
--     start of the first steps, before any GPU op those launched (so outside every GPU window: none of the 509 on
--     the H100 Qwen trace or of the 968 on the MI300X ResNet trace is in one), and the steps analysis counts them
--     in the CPU window too (unlaunched_gpu_ms).
--   Events starting outside every step window (before the first step, between or after steps) belong to none.
-- iterations_only: the serving iterations' steps alone (phase_kernels), the others' events in none; with none of
-- them, no event is placed at all (the placing took 0.07 s of a 53 MB training trace's phase_kernels, which was
-- then empty). A rank's steps are all of one marker (step_windows), so an iteration's events are the same either way.
create or replace macro step_members(iterations_only := false) as table
    with sm_steps as materialized (
        select rank, step, start_ns, end_ns, coalesce(gpu_start_ns, start_ns) as gpu_start_ns,
               coalesce(gpu_end_ns, end_ns) as gpu_end_ns
        from step_windows()
        where not iterations_only or marker <> 'profiler_step'
    ),
    sm_launches as materialized (
        select rank, src as call_id, dst as id from edges where kind = 'launch'
    ),
    -- the events of ranks with steps only: an as-of join sorts all of its events, steps or none (a serving
    -- trace's iterations_only: 0.024 s of OWLv2's phase_kernels for no row)
    sm_events as not materialized (
        select e.rank, e.id, e.kind, e.ts from events e semi join sm_steps s on s.rank = e.rank
    ),
    sm_by_cpu_window as (
        select e.rank, e.id, s.step
        from sm_events e asof join sm_steps s on s.rank = e.rank and s.start_ns <= e.ts
        where e.kind <> 'gpu_annotation' and e.ts < s.end_ns
    ),
    sm_host_or_unlaunched as materialized (
        select * from sm_by_cpu_window m anti join sm_launches l on l.rank = m.rank and l.id = m.id
    ),
    sm_launched as (
        select l.rank, l.id, h.step
        from sm_launches l join sm_host_or_unlaunched h on h.rank = l.rank and h.id = l.call_id
    ),
    sm_gpu_annotations as (
        select e.rank, e.id, s.step
        from sm_events e asof join sm_steps s on s.rank = e.rank and s.gpu_start_ns <= e.ts
        where e.kind = 'gpu_annotation' and e.ts < s.gpu_end_ns
    )
    select rank, id, step from sm_host_or_unlaunched
    union all select rank, id, step from sm_launched
    union all select rank, id, step from sm_gpu_annotations;

-- step_events(of_step): the events of step N on every rank that has it (step_members()). Columns: rank, id.
create or replace macro step_events(of_step) as table
    select rank, id from step_members() where step = of_step;

-- steady_steps(): the warm-up rule of step_stats, per rank and phase (see the header).
create or replace macro steady_steps() as table
    with ss_judged as (
        select *, count(*) filter (where unlaunched_ns = 0) over (partition by rank, phase) as complete_steps,
               count(*) over (partition by rank, phase) as phase_steps
        from step_metrics()
    )
    select *, steady as used, if(complete_steps = 0, 'all_steps', 'complete_steps') as basis
    from ss_judged;
