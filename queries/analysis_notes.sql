-- question: What did the analyses (not the reading or linking) have to leave out or could not answer, per rank?
-- inputs: ranks, events, edges, graph_kernels, device_peaks
-- includes: lib/peaks, lib/steps
-- columns:
--   rank: rank
--   stage: query (the notes of this analysis are written when the analyses run, not when the trace is read)
--   reason: short machine-readable reason: unknown_device (the rank ran kernels on a device the peaks table lacks),
--     no_steps (the rank has no ProfilerStep#N and no serving iteration marker)
--   source_file: file the rank was read from
--   position: null (a note about the rank, not about one entry)
--   dropped: false (nothing is dropped: the answer is left null)
--   detail: explanation
--   raw: null
-- notes: The diagnostics analyses (diagnostics_summary, diagnostics_list, diagnostics_reasons, rank_info's count)
--   show these notes beside the `diagnostics` table's, in its columns. unknown_device: op_perf's and roofline's
--   percent_of_peak and collective_perf's link share are null on that rank (lib/peaks.sql's rank_devices(); a rank
--   without kernels, e.g. a CPU-only trace, has nothing to hold to a peak and gets no note). no_steps: a rank with
--   CPU ops or GPU work but no step (lib/steps.sql's step_windows(): ProfilerStep#N, else a serving engine's
--   iteration markers as lib/iterations.sql knows them) has empty per-step figures (steps, step_stats, the
--   Overview's step time); the detail names its most repeated top-level annotation, which may be an iteration
--   under a name tracekit does not know (select its events with `tracekit sql`).
select d.rank, 'query' as stage, 'unknown_device' as reason, r.source_file, null::bigint as position,
       false as dropped,
       d.peak_note || ' (percent_of_peak in op_perf and roofline, and the link share of collective_perf, are null)'
           as detail,
       null::varchar as raw
from rank_devices() d
join ranks r using (rank)
where d.device is null
  and exists (select 1 from events e where e.rank = d.rank and e.kind = 'kernel')
union all
select r.rank, 'query', 'no_steps', r.source_file, null::bigint, false,
       'no ProfilerStep#N and no serving iteration marker (queries/lib/iterations.sql): the per-step figures (steps, '
       || 'step_stats, the Overview''s step time) are empty, and the critical path (unless left out) takes the '
       || 'whole trace as one window'
       || coalesce('; the most repeated top-level annotation, ' || a.name || ' (' || a.calls::varchar
                   || ' calls), is not a marker tracekit knows', ''),
       null::varchar
from ranks r
left join (
    select e.rank, e.name, count(*) as calls
    from events e
    anti join edges n on n.rank = e.rank and n.kind = 'nest' and n.dst = e.id
        and exists (select 1 from events p where p.rank = n.rank and p.id = n.src and p.kind = 'user_annotation')
    where e.kind = 'user_annotation'
    group by e.rank, e.name
    having count(*) > 1
    qualify row_number() over (partition by e.rank order by count(*) desc, e.name) = 1
) a on a.rank = r.rank
where r.rank not in (select rank from step_windows())
  and exists (select 1 from events e where e.rank = r.rank and e.kind in ('cpu_op', 'kernel', 'memcpy', 'memset'))
order by 1, 3
