-- question: Over all ranks, what could tracekit not use or link, by reason (for the terminal summary)?
-- inputs: diagnostics, ranks, analysis_notes
-- scope: across ranks
-- columns:
--   stage: stage that wrote the note (query: analysis_notes)
--   reason: short machine-readable reason
--   entries: notes with this reason (each counted once, whatever rank it concerns)
--   ranks: ranks concerned (0 for notes about no rank, such as a file that was not read)
--   dropped: notes whose entry became no row in any table
--   example: detail of the first such note (by rank, file and position)
select stage, reason, count(*) as entries,
       count(distinct rank) filter (where rank in (select rank from ranks)) as ranks,
       count(*) filter (where dropped) as dropped,
       arg_min(detail, (coalesce(rank, -1), coalesce(source_file, ''), coalesce(position, -1), coalesce(detail, '')))
           as example
from (select * from diagnostics union all by name select * from analysis_notes)
group by stage, reason
order by entries desc, stage, reason
