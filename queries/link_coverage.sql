-- question: How much of each rank's trace did tracekit link into the dependency graph (so how far can analyses
--   built on edges be trusted)?
-- inputs: events, edges, flows, diagnostics
-- columns:
--   rank: rank
--   gpu_ops: count, kernels, memcpys and memsets
--   linked_gpu_ops: count, GPU ops with a launch edge (their launch call is in the trace)
--   percent_gpu_ops_linked: percent, linked_gpu_ops / gpu_ops
--   launch_calls: count, runtime/driver calls that enqueue GPU work (name has launch, memcpy, memset) or launched some
--   launch_calls_with_gpu_op: count, launch calls with at least one launch edge
--   percent_launch_calls_with_gpu_op: percent, launch_calls_with_gpu_op / launch_calls
--   cpu_ops: count, cpu_op events
--   cpu_ops_launching: count, cpu_ops that directly contain (nest parent of) a call with a launch edge
--   sync_events: count, cuda_sync events
--   sync_events_resolved: count, sync events that gave at least one sync edge
--   percent_sync_events_resolved: percent, sync_events_resolved / sync_events (null without sync events)
--   fwdbwd_endpoints: count, s and f endpoints of fwdbwd flows
--   fwdbwd_endpoints_bound: count, endpoints bound to a cpu_op
--   fwdbwd_edges: count, flow edges (forward op → backward op)
-- notes: GPU ops without a launcher were queued before the profiling window (see diagnostics no_launcher). Sync
--   events are unresolved when the trace does not say what they waited on (ids -1 from libkineto before its
--   cuda_sync fix) or when that work is not in the trace; diagnostics holds one row per such event (reason sync_*).
--   The launch-call name test is the one of queries/link/unlinked_launches.sql.
with ranks as (
    select distinct rank from events
),
gpu as (
    select g.rank, count(*) as gpu_ops, count(l.dst) as linked_gpu_ops
    from events g left join (select rank, dst from edges where kind = 'launch') l on l.rank = g.rank and l.dst = g.id
    where g.kind in ('kernel', 'memcpy', 'memset')
    group by g.rank
),
launchers as (
    select distinct rank, src as id from edges where kind = 'launch'
),
calls as (
    select c.rank, count(*) as launch_calls, count(l.id) as launch_calls_with_gpu_op
    from events c left join launchers l on l.rank = c.rank and l.id = c.id
    where c.kind in ('runtime', 'driver') and (regexp_matches(c.name, '(?i)(launch|memcpy|memset)') or l.id is not null)
    group by c.rank
),
cpu as (
    select o.rank, count(*) as cpu_ops, count(p.src) as cpu_ops_launching
    from events o
    left join (select distinct n.rank, n.src from edges n join launchers l on l.rank = n.rank and l.id = n.dst
               where n.kind = 'nest') p on p.rank = o.rank and p.src = o.id
    where o.kind = 'cpu_op'
    group by o.rank
),
sync as (
    select s.rank, count(*) as sync_events, count(*) - count(d.position) as sync_events_resolved
    from events s
    left join (select distinct rank, position from diagnostics
               where stage = 'edges' and reason like 'sync\_%' escape '\') d on d.rank = s.rank and d.position = s.id
    where s.kind = 'sync'
    group by s.rank
),
fwdbwd as (
    select f.rank, count(*) as fwdbwd_endpoints, count(*) - count(d.position) as fwdbwd_endpoints_bound
    from flows f
    left join (select distinct rank, position from diagnostics
               where stage = 'edges' and reason = 'flow_endpoint_unbound') d on d.rank = f.rank and d.position = f.id
    where f.cat = 'fwdbwd' and f.phase in ('s', 'f')
    group by f.rank
),
flow_edges as (
    select rank, count(*) as fwdbwd_edges from edges where kind = 'flow' and subkind = 'fwdbwd' group by rank
)
select r.rank,
       coalesce(gpu_ops, 0) as gpu_ops,
       coalesce(linked_gpu_ops, 0) as linked_gpu_ops,
       100.0 * linked_gpu_ops / nullif(gpu_ops, 0) as percent_gpu_ops_linked,
       coalesce(launch_calls, 0) as launch_calls,
       coalesce(launch_calls_with_gpu_op, 0) as launch_calls_with_gpu_op,
       100.0 * launch_calls_with_gpu_op / nullif(launch_calls, 0) as percent_launch_calls_with_gpu_op,
       coalesce(cpu_ops, 0) as cpu_ops,
       coalesce(cpu_ops_launching, 0) as cpu_ops_launching,
       coalesce(sync_events, 0) as sync_events,
       coalesce(sync_events_resolved, 0) as sync_events_resolved,
       100.0 * sync_events_resolved / nullif(sync_events, 0) as percent_sync_events_resolved,
       coalesce(fwdbwd_endpoints, 0) as fwdbwd_endpoints,
       coalesce(fwdbwd_endpoints_bound, 0) as fwdbwd_endpoints_bound,
       coalesce(fwdbwd_edges, 0) as fwdbwd_edges
from ranks r
left join gpu using (rank)
left join calls using (rank)
left join cpu using (rank)
left join sync using (rank)
left join fwdbwd using (rank)
left join flow_edges using (rank)
order by r.rank
