-- question: What did the analyses (not the reading or linking) have to leave out or could not answer, per rank?
-- inputs: ranks, events, device_peaks
-- includes: lib/peaks
-- columns:
--   rank: rank
--   stage: query (the notes of this analysis are written when the analyses run, not when the trace is read)
--   reason: short machine-readable reason: unknown_device (the rank ran kernels on a device the peaks table lacks)
--   source_file: file the rank was read from
--   position: null (a note about the rank, not about one entry)
--   dropped: false (nothing is dropped: the answer is left null)
--   detail: explanation
--   raw: null
-- notes: The diagnostics analyses (diagnostics_summary, diagnostics_list, diagnostics_reasons, rank_info's count)
--   show these notes beside the `diagnostics` table's, in its columns. unknown_device: op_perf's and roofline's
--   percent_of_peak and collective_perf's link share are null on that rank (lib/peaks.sql's rank_devices(); a rank
--   without kernels, e.g. a CPU-only trace, has nothing to hold to a peak and gets no note).
select d.rank, 'query' as stage, 'unknown_device' as reason, r.source_file, null::bigint as position,
       false as dropped,
       d.peak_note || ' (percent_of_peak in op_perf and roofline, and the link share of collective_perf, are null)'
           as detail,
       null::varchar as raw
from rank_devices() d
join ranks r using (rank)
where d.device is null
  and exists (select 1 from events e where e.rank = d.rank and e.kind = 'kernel')
order by d.rank
