-- question: What could tracekit not use or link on each rank, grouped by reason?
-- inputs: diagnostics, ranks, analysis_notes
-- columns:
--   rank: rank (a note about no rank in particular, e.g. a file-level one, counts for the ranks read from its file;
--     notes about a file that gave no rank, such as one that could not be read, are in diagnostics_reasons)
--   stage: stage that wrote the note (ingest, edges, et, ...; query for analysis_notes)
--   reason: short machine-readable reason
--   entries: notes with this reason
--   dropped: notes whose entry became no row in any table
--   listed: how many of them diagnostics_list shows (it keeps the first 100 of each reason)
--   example: detail of the first such note (by file and position)
with notes as (
    select r.rank, d.* exclude (rank)
    from diagnostics d
    join ranks r on d.rank = r.rank
    or (d.rank is null or d.rank not in (select rank from ranks)) and d.source_file = r.source_file
    union all by name
    select * from analysis_notes
)
select rank, stage, reason,
       count(*) as entries,
       count(*) filter (where dropped) as dropped,
       least(count(*), 100) as listed,
       arg_min(detail, (coalesce(source_file, ''), coalesce(position, -1), coalesce(detail, ''))) as example
from notes
group by rank, stage, reason
order by rank, entries desc, stage, reason
