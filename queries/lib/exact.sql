-- about: aggregates whose result does not depend on the order rows arrive in (DuckDB adds up partial results of
-- parallel threads in the order they finish, and float sums then differ in their last bits from run to run).
-- inputs:
-- includes:
-- macros:
--   stddev_ns(x): sample standard deviation of integer x (ns), from exact 128-bit sums of x and x², null under
--     two values.
--   ordered_stddev(x): sample standard deviation of float x, added up in value order.
--   ordered_mean(x): mean of float x, added up in value order.

create or replace macro stddev_ns(x) as
    case when count(x) > 1 then
        sqrt(greatest((count(x)::hugeint * sum(x::hugeint * x) - sum(x::hugeint) * sum(x::hugeint))::double, 0)
             / (count(x)::double * (count(x) - 1)))
    end;
create or replace macro ordered_stddev(x) as list_aggregate(list(x order by x) filter (x is not null), 'stddev_samp');
create or replace macro ordered_mean(x) as list_avg(list(x order by x) filter (x is not null));
