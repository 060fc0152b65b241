-- question: How much time does each GPU kernel take on every rank, side by side?
-- inputs: kernel_summary, ranks
-- scope: across ranks
-- includes: lib/rank_spread
-- columns:
--   kernel_name: kernel name
--   category: kernel category
--   total_ms: ms, kernel time summed over ranks
--   min_ms: ms, least on a rank (0 where a rank never ran the kernel)
--   median_ms: ms, median over ranks
--   max_ms: ms, most on a rank
--   spread_percent: percent, (max - min) / median
--   outlier_rank: rank furthest from the median (lowest rank on ties; null when all ranks agree)
--   by_rank: list of ms, the kernel's total time on every rank of the trace set, in rank order
--   ranks_listed: the ranks of the trace set, in order: by_rank[i] is rank ranks_listed[i]
with ops as (
    select distinct kernel_name as name, category from kernel_summary
),
values_by_rank as (
    select o.name, o.category, r.rank, coalesce(s.kernel_ms, 0) as value
    from ops o cross join (select rank from ranks) r
    left join (select rank, kernel_name as name, category, sum(total_us) / 1e3 as kernel_ms
               from kernel_summary group by rank, kernel_name, category) s
      on s.rank = r.rank and s.name = o.name and s.category is not distinct from o.category
)
select name as kernel_name, * exclude (name)
from spread_across_ranks(values_by_rank)
order by total_ms desc, name, category
