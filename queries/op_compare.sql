-- question: How much kernel time does each op take on every rank, side by side?
-- inputs: op_summary, ranks
-- scope: across ranks
-- includes: lib/rank_spread
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
)
select * from spread_across_ranks(values_by_rank)
order by total_ms desc, name, category
