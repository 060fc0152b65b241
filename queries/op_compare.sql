-- question: How much kernel time does each op take on every rank, side by side?
-- inputs: op_summary, ranks
-- columns:
--   name: op name
--   category: op category
--   total_ms: ms, direct kernel time summed over ranks
--   min_ms: ms, least on a rank (0 where a rank never ran the op)
--   median_ms: ms, median over ranks
--   max_ms: ms, most on a rank
--   spread_percent: percent, (max - min) / median
--   outlier_rank: rank furthest from the median (lowest rank on ties; null when all ranks agree)
--   by_rank: list of ms, the op's direct kernel time on every rank of the trace set, in rank order
--   ranks_listed: the ranks of the trace set, in order: by_rank[i] is rank ranks_listed[i]
with ops as (
    select distinct name, category from op_summary
),
values_by_rank as (
    select o.name, o.category, r.rank, coalesce(s.direct_kernel_ms, 0) as value
    from ops o cross join (select rank from ranks) r
    left join (select rank, name, category, sum(direct_kernel_ms) as direct_kernel_ms
               from op_summary group by rank, name, category) s
      on s.rank = r.rank and s.name = o.name and s.category is not distinct from o.category
),
stats as (
    select name, category, sum(value) as total_ms, min(value) as min_ms, median(value) as median_ms,
           max(value) as max_ms, (max(value) - min(value)) / nullif(median(value), 0) * 100 as spread_percent
    from values_by_rank group by name, category
),
outliers as (
    select v.name, v.category, arg_max(v.rank, (abs(v.value - s.median_ms), -v.rank)) as outlier_rank,
           max(abs(v.value - s.median_ms)) as deviation
    from values_by_rank v join stats s on s.name = v.name and s.category is not distinct from v.category
    group by v.name, v.category
),
by_rank as (
    select name, category, list(value order by rank) as by_rank, list(rank order by rank) as ranks_listed
    from values_by_rank group by name, category
)
select s.name, s.category, s.total_ms, s.min_ms, s.median_ms, s.max_ms, s.spread_percent,
       case when o.deviation > 0 then o.outlier_rank end as outlier_rank,
       p.by_rank, p.ranks_listed
from stats s
join outliers o on o.name = s.name and o.category is not distinct from s.category
join by_rank p on p.name = s.name and p.category is not distinct from s.category
order by s.total_ms desc, s.name, s.category
