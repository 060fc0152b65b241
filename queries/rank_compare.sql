-- question: How do the ranks compare on the headline metrics, and which rank is the outlier?
-- inputs: step_stats, gpu_timeline, op_summary, ranks
-- scope: across ranks
-- columns:
--   metric_order: position of the metric in the list (for sorting)
--   metric: metric name, with its unit
--   min: value on the lowest rank (same unit as the metric)
--   median: median over ranks
--   max: value on the highest rank
--   spread_percent: percent, (max - min) / median
--   outlier_rank: rank furthest from the median (lowest rank on ties; null when all ranks agree)
--   outlier_deviation_percent: percent, |outlier value - median| / median
--   by_rank: list, the metric's value on every rank of the trace set, in rank order (null where missing)
--   ranks_listed: the ranks of the trace set, in order: by_rank[i] is rank ranks_listed[i]
-- notes: every metric is in ms. Step time is the median over the rank's steps (step_stats); GPU figures cover the
--   rank's whole trace window (gpu_timeline); "Kernel time of OP" is op_summary.direct_kernel_ms of the 5 ops with
--   the most kernel time over all ranks (0 on a rank that never ran the op).
with top_ops as (
    select name, row_number() over (order by sum(direct_kernel_ms) desc, name) as position
    from op_summary
    group by name
    qualify position <= 5
),
values_by_rank as (
    select rank, 1 as metric_order, 'Step time, median (ms)' as metric, median as value
    from step_stats where metric = 'duration_ms'
    union all
    select rank,
           case category when 'total' then 2 when 'busy' then 3 when 'idle' then 4 when 'computation' then 5
                         when 'exposed_communication' then 6 when 'communication' then 7 when 'exposed_memcpy' then 8 end,
           case category when 'total' then 'GPU window (ms)' when 'busy' then 'GPU busy (ms)'
                         when 'idle' then 'GPU idle (ms)' when 'computation' then 'Computation (ms)'
                         when 'exposed_communication' then 'Exposed communication (ms)'
                         when 'communication' then 'Communication (ms)' when 'exposed_memcpy' then 'Exposed memcpy (ms)' end,
           time_ms
    from gpu_timeline
    where category in ('total', 'busy', 'idle', 'computation', 'exposed_communication', 'communication', 'exposed_memcpy')
    union all
    select r.rank, 10 + t.position, 'Kernel time of ' || t.name || ' (ms)',
           coalesce((select sum(o.direct_kernel_ms) from op_summary o where o.rank = r.rank and o.name = t.name), 0)
    from ranks r cross join top_ops t
),
stats as (
    select metric_order, metric, min(value) as min, median(value) as median, max(value) as max,
           (max(value) - min(value)) / nullif(median(value), 0) * 100 as spread_percent
    from values_by_rank
    group by metric_order, metric
),
outliers as (
    select v.metric, arg_max(v.rank, (abs(v.value - s.median), -v.rank)) as outlier_rank,
           max(abs(v.value - s.median)) as deviation
    from values_by_rank v join stats s using (metric)
    where v.value is not null
    group by v.metric
),
by_rank as (
    select m.metric, list(v.value order by r.rank) as by_rank, list(r.rank order by r.rank) as ranks_listed
    from (select distinct metric from values_by_rank) m cross join ranks r
    left join values_by_rank v on v.metric = m.metric and v.rank = r.rank
    group by m.metric
)
select s.metric_order, s.metric, s.min, s.median, s.max, s.spread_percent,
       case when o.deviation > 0 then o.outlier_rank end as outlier_rank,
       case when o.deviation > 0 then o.deviation / nullif(abs(s.median), 0) * 100 end as outlier_deviation_percent,
       p.by_rank, p.ranks_listed
from stats s
left join outliers o using (metric)
left join by_rank p using (metric)
order by s.metric_order, s.metric
