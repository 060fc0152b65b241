-- about: moving around one rank's event graph from an event (table macros for ad-hoc SQL; no analysis uses them).
-- inputs: events, edges
-- includes:
-- macros:
--   ancestors(of_rank, of_id): the events above event (of_rank, of_id): for a GPU op its launch call, then the
--     call's enclosing ops on its thread (nest edges), up to the root. Every events column, plus distance (1 = the
--     nearest) and via (the kind of the edge climbed to reach it: launch or nest).
--   descendants(of_rank, of_id): the events below it: nested host events at any depth and the GPU ops launched by
--     any of them (launch edges). Every events column, plus distance and via.
--   overlapping(of_rank, of_id): the events of the same rank on other tracks (another pid or tid: other threads,
--     other GPU streams) whose span overlaps the event's, with overlap_ns (the overlapping length; spans are
--     half-open, so a zero-length event counts when it falls inside), in start order.

create or replace macro ancestors(of_rank, of_id) as table
    with recursive up(id, distance, via) as (
        select of_id::bigint, 0, null::varchar
        union all
        select g.src, u.distance + 1, g.kind
        from up u join edges g on g.rank = of_rank and g.dst = u.id and g.kind in ('nest', 'launch')
    )
    select e.*, u.distance, u.via
    from up u join events e on e.rank = of_rank and e.id = u.id
    where u.distance > 0
    order by u.distance;

create or replace macro descendants(of_rank, of_id) as table
    with recursive down(id, distance, via) as (
        select of_id::bigint, 0, null::varchar
        union all
        select g.dst, d.distance + 1, g.kind
        from down d join edges g on g.rank = of_rank and g.src = d.id and g.kind in ('nest', 'launch')
    )
    select e.*, d.distance, d.via
    from down d join events e on e.rank = of_rank and e.id = d.id
    where d.distance > 0
    order by e.ts, e.id;

create or replace macro overlapping(of_rank, of_id) as table
    with target as (select rank, pid, tid, ts, ts + coalesce(dur, 0) as end_ns from events
                    where rank = of_rank and id = of_id and ts is not null)
    select e.*, least(e.ts + coalesce(e.dur, 0), t.end_ns) - greatest(e.ts, t.ts) as overlap_ns
    from events e join target t on e.rank = t.rank
    where (e.pid is distinct from t.pid or e.tid is distinct from t.tid)
      and e.ts < t.end_ns and (e.ts + coalesce(e.dur, 0) > t.ts or e.ts >= t.ts)
    order by e.ts, e.id;
