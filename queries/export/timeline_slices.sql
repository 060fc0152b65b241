-- question: Which slices does the all-ranks timeline show, on which track, and as what Chrome-trace JSON?
-- inputs: events, threads (for --step, those tracekit/query/step_scope.py cut to the step)
-- columns:
--   rank: rank
--   id: events.id
--   ts: ns, start (epoch)
--   end_ns: ns, end
--   process: the viewer's process name: "rank R · CPU" (with the pid where a rank has several) or "rank R · GPU D"
--   process_order: sort order of the process: ranks in order; in a rank, its CPU processes, then its GPUs
--   track: the track name: "rank R · CPU · <thread name or tid>", "rank R · GPU D · stream S", "... · sync" for
--     cuda_sync events, "... · stream S · annotations" for GPU annotations
--   track_order: sort order of the track in its process
--   track_key: what tells the tracks of a process apart (two threads may have one name)
--   nests: true on CPU threads (slices may nest), false on GPU tracks (slices must not overlap)
--   body: the slice's JSON members except pid and tid: ph X, name, cat, ts and dur in µs from the earliest slice
--     (exact to the ns as decimal text), args as written in the trace plus "rank"
--   base_ns: ns, the earliest slice start (the file's baseTimeNanoseconds)
-- notes: args keep the trace's text and gain "rank", so `tracekit` reads the file back with every event on its
--   rank (as a TraceFuse-merged file). Events without a timestamp are left out; a null or negative duration is
--   written as 0 (the reader nulls negative ones). The body is one concat() of its parts: `a || b || ...` made a
--   string per operator, each copying the ones before (SD3.5, 153k slices, with the args' fast path below: the
--   query 0.78 -> 0.58 CPU s); format() took twice as long a slice. No part is null (where concat() and || differ).
--   In no order: the caller sorts the rows by (process_order, track_order, track_key, ts, end_ns desc, id) in
--   Polars, which moves each body as a 16-byte view; this query's sort moved the bodies themselves (SD3.5: 0.42 ->
--   0.29 s for the query and the sort on one thread).
with
selected as materialized (
    select *, case when on_gpu then lpad(coalesce(device::varchar, pid), 9, '0') else pid end as process_key
    from (select e.*, e.kind in ('kernel', 'memcpy', 'memset', 'gpu_annotation', 'sync') as on_gpu
          from events e
          where e.ts is not null)
),
cpu_pids as (
    select rank, count(distinct pid) as pids from selected where not on_gpu group by rank
),
-- each process's place among its rank's CPU processes or GPUs: ranked over the few processes, not every slice
process_ranks as (
    select rank, on_gpu, process_key, dense_rank() over (partition by rank, on_gpu order by process_key) as process_rank
    from (select distinct rank, on_gpu, process_key from selected)
),
placed as (
    select s.rank, s.id, s.ts, s.ts + coalesce(s.dur, 0) as end_ns, s.cat, s.name, s.dur, s.args,
           case when s.on_gpu then 'rank ' || s.rank || ' · GPU ' || coalesce(s.device::varchar, s.pid)
                when p.pids > 1 then 'rank ' || s.rank || ' · CPU · pid ' || s.pid
                else 'rank ' || s.rank || ' · CPU' end as process,
           s.rank * 1000 + case when s.on_gpu then 100 else 1 end + r.process_rank as process_order,
           case when s.kind = 'sync' then 'sync'
                when s.kind = 'gpu_annotation' then 'stream ' || coalesce(s.stream::varchar, s.tid) || ' · annotations'
                when s.on_gpu then 'stream ' || coalesce(s.stream::varchar, s.tid)
                else coalesce(t.thread_name, 'thread ' || s.tid) end as track_suffix,
           case when s.kind = 'sync' then 1e12
                when s.on_gpu then coalesce(s.stream, try_cast(s.tid as bigint), 0) * 2 + (s.kind = 'gpu_annotation')::int
                else coalesce(t.sort_index, try_cast(s.tid as bigint), 0) end as track_order,
           not s.on_gpu as nests,
           case when s.on_gpu then track_suffix else s.tid end as track_key
    from selected s
    left join cpu_pids p on p.rank = s.rank
    join process_ranks r on r.rank = s.rank and r.on_gpu = s.on_gpu and r.process_key is not distinct from s.process_key
    left join threads t on t.rank = s.rank and t.pid = s.pid and t.tid = s.tid and not s.on_gpu
)
select rank, id, ts, end_ns, process, process_order, process || ' · ' || track_suffix as track,
       track_order::bigint as track_order, track_key, nests,
       concat('"ph":"X","name":', to_json(coalesce(name, '')), coalesce(',"cat":' || to_json(cat), ''),
              ',"ts":', (ts - base_ns) // 1000, '.', lpad(((ts - base_ns) % 1000)::varchar, 3, '0'),
              ',"dur":', greatest(dur, 0) // 1000, '.', lpad((greatest(dur, 0) % 1000)::varchar, 3, '0'),
              ',"args":',
              -- (an object with a member has a colon: the regex only for those without one)
              case when args is null or (not contains(args, ':') and regexp_matches(args, '^\s*\{\s*\}\s*$'))
                   then concat('{"rank":', rank, '}')
                   -- (nearly every args object ends in its brace: no regex for those)
                   when ends_with(args, '}') then concat(substr(args, 1, length(args) - 1), ',"rank":', rank, '}')
                   else regexp_replace(args, '\}\s*$', concat(',"rank":', rank, '}')) end) as body,
       base_ns
-- the earliest start as a scalar joined to every row: `min(ts) over ()` gathered every slice's columns into one
-- window partition first (MI300X resnet x4: 0.50 s and +416 MB for this query, against 0.36 s and +72 MB)
from placed cross join (select min(ts) as base_ns from selected)
