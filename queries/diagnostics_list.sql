-- question: Which entries could tracekit not use or link (the first 100 of each reason, per rank)?
-- inputs: diagnostics, ranks, analysis_notes
-- columns:
--   rank: rank (a note about no rank in particular, e.g. a file-level one, is listed for the ranks read from its file)
--   stage: stage that wrote the note (query: analysis_notes)
--   reason: short machine-readable reason
--   source_file: file concerned
--   position: position in the file's traceEvents (null for file-level notes)
--   dropped: true when the entry became no row in any table
--   detail: explanation
--   raw: the entry as JSON text, when it was dropped
-- notes: capped so that a trace with a million unlinked events still gives a small sheet; diagnostics_summary
--   has the full counts.
with notes as (
    select r.rank, d.* exclude (rank)
    from diagnostics d
    join ranks r on d.rank = r.rank
    or (d.rank is null or d.rank not in (select rank from ranks)) and d.source_file = r.source_file
    union all by name
    select * from analysis_notes
)
select rank, stage, reason, source_file, position, dropped, detail, raw
from notes
qualify row_number() over (partition by rank, stage, reason
                           order by source_file, position nulls first, detail, raw) <= 100
order by rank, stage, reason, source_file, position nulls first, detail, raw
