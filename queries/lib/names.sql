-- about: the categories of each distinct GPU op name (table macros): what the analyses join instead of calling the
--   category macros of lib/categories.sql in each statement.
-- inputs: events
-- includes: lib/categories
-- macros:
--   gpu_op_categories(): each distinct (name, kind) of the GPU ops (kernel, memcpy, memset) among the events, with
--     its kernel_category (category) and gpu_timeline_category (timeline_category): a query joins this table where
--     it would call those macros, so their regexes are planned once per connection that materializes it
--     (catalog.SHARED_TABLE_MACROS) and run once per name, not per op (with op_name_categories: the report's
--     analyses 3.6% and 6.3% fewer instructions on the recorded OWLv2 and SD3.5 traces, bench/RESULTS.md).
-- notes: A category macro is bound anew in every statement that calls it, its regexes with it (5–15 ms of planning
--   a call), and evaluated on every row; the names are few. op_name_categories (lib/launches.sql) does the same for
--   op names.

create or replace macro gpu_op_categories() as table
    select name, kind, kernel_category(name, kind) as category, gpu_timeline_category(name, kind) as timeline_category
    from (select distinct name, kind from events where kind in ('kernel', 'memcpy', 'memset'));
