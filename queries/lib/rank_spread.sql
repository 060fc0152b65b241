-- about: a value per (name, category) on every rank, side by side with its spread across ranks (table macro).
-- inputs:
-- includes:
-- macros:
--   spread_across_ranks(values_by_rank): `values_by_rank` names a table or CTE with columns name, category, rank,
--     value (one row per rank, 0 where absent). One row per (name, category): total_ms, min_ms, median_ms,
--     max_ms, spread_percent ((max - min) / median * 100), outlier_rank (the rank furthest from the median, null
--     when none differs), by_rank and ranks_listed (each rank's value, in rank order).

create or replace macro spread_across_ranks(values_by_rank) as table
    with rs_values as (select name, category, rank, value from query_table(values_by_rank)),
    rs_stats as (
        select name, category, sum(value) as total_ms, min(value) as min_ms, median(value) as median_ms,
               max(value) as max_ms, (max(value) - min(value)) / nullif(median(value), 0) * 100 as spread_percent
        from rs_values group by name, category
    ),
    rs_outliers as (
        select v.name, v.category, arg_max(v.rank, (abs(v.value - s.median_ms), -v.rank)) as outlier_rank,
               max(abs(v.value - s.median_ms)) as deviation
        from rs_values v join rs_stats s on s.name = v.name and s.category is not distinct from v.category
        group by v.name, v.category
    ),
    rs_by_rank as (
        select name, category, list(value order by rank) as by_rank, list(rank order by rank) as ranks_listed
        from rs_values group by name, category
    )
    select s.name, s.category, s.total_ms, s.min_ms, s.median_ms, s.max_ms, s.spread_percent,
           case when o.deviation > 0 then o.outlier_rank end as outlier_rank,
           p.by_rank, p.ranks_listed
    from rs_stats s
    join rs_outliers o on o.name = s.name and o.category is not distinct from s.category
    join rs_by_rank p on p.name = s.name and p.category is not distinct from s.category;
