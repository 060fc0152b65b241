-- question: How long did each step take on every rank, and which rank was slowest?
-- inputs: steps, ranks
-- scope: across ranks
-- columns:
--   step: step number (steps are matched across ranks by number)
--   ranks: ranks that have the step
--   min_ms: ms, shortest duration over ranks
--   median_ms: ms, median duration over ranks
--   max_ms: ms, longest duration over ranks
--   spread_percent: percent, (max - min) / median
--   slowest_rank: rank with the longest step (lowest rank on ties)
--   by_rank: list of ms, the step's duration on every rank of the trace set, in rank order (null: no such step)
--   ranks_listed: the ranks of the trace set, in order: by_rank[i] is rank ranks_listed[i]
with durations as (
    select step, rank, sum(duration_ms) as duration_ms from steps group by step, rank
),
stats as (
    select step, count(*) as ranks, min(duration_ms) as min_ms, median(duration_ms) as median_ms,
           max(duration_ms) as max_ms,
           (max(duration_ms) - min(duration_ms)) / nullif(median(duration_ms), 0) * 100 as spread_percent,
           arg_max(rank, (duration_ms, -rank)) as slowest_rank
    from durations
    group by step
),
by_rank as (
    select s.step, list(d.duration_ms order by r.rank) as by_rank, list(r.rank order by r.rank) as ranks_listed
    from (select distinct step from durations) s cross join ranks r
    left join durations d on d.step = s.step and d.rank = r.rank
    group by s.step
)
select s.*, p.by_rank, p.ranks_listed
from stats s join by_rank p using (step)
order by s.step
