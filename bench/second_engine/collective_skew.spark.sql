-- tracekit's collective_skew analysis (queries/collective_skew.sql over collective_kernels() of
-- queries/lib/collectives.sql), written in Spark SQL over the dataset's base tables: the same definitions, column
-- for column, in Spark's dialect: rlike for regexp_matches, max_by(x, struct(...)) for arg_max(x, struct_pack(...)),
-- get_json_object / from_json for json_extract, aggregate() for list_product, inlined CASEs for the macros
-- collective_type() and collective_dtype_bytes(), and a recursive CTE (Spark >= 4.1) for the walk up the nest edges.
-- Its kernels are the NCCL/RCCL ones: the part of communication_kernel() the synth job it runs on exercises.
with recursive
ck_kernels as (
    select k.rank, k.id, k.name, k.ts, k.dur, k.collective_name, k.in_msg_nelems, k.out_msg_nelems, k.dtype,
           k.group_size, k.process_group_name, k.process_group_ranks, l.src as call_id
    from events k
    left join edges l on l.kind = 'launch' and l.rank = k.rank and l.dst = k.id
    where k.kind = 'kernel' and k.name rlike '(?i)nccl|rccl'
),
-- the launch call's enclosing events, nearest first, up to the first that says what the collective is
ck_up(rank, kernel_id, node, depth, found) as (
    select rank, id, call_id, 0, false from ck_kernels where call_id is not null
    union all
    select u.rank, u.kernel_id, n.src, u.depth + 1,
           p.collective_name is not null or p.name rlike '^(nccl|rccl|gloo):'
    from ck_up u
    join edges n on n.kind = 'nest' and n.rank = u.rank and n.dst = u.node
    join events p on p.rank = n.rank and p.id = n.src
    where not u.found
),
ck_describer as (
    select u.rank, u.kernel_id, p.name, p.collective_name, p.in_msg_nelems, p.out_msg_nelems, p.dtype,
           p.group_size, p.process_group_name, p.process_group_ranks,
           coalesce(aggregate(from_json(get_json_object(p.input_dims, '$[0]'), 'array<bigint>'),
                              cast(1 as bigint), (acc, x) -> acc * x), 1) as annotation_nelems,
           get_json_object(p.input_type, '$[0]') as annotation_dtype
    from ck_up u join events p on p.rank = u.rank and p.id = u.node
    where u.found
),
ck_described as (
    select k.rank, k.id as event_id, k.name as kernel_name, k.ts as start_ns, k.ts + k.dur as end_ns, k.dur,
           k.collective_name as k_collective_name, d.collective_name as d_collective_name, d.name as d_name,
           case when k.collective_name is not null then k.in_msg_nelems
                when d.collective_name is not null then d.in_msg_nelems
                else d.annotation_nelems end as in_nelems,
           case when k.collective_name is not null then k.out_msg_nelems
                when d.collective_name is not null then d.out_msg_nelems
                else d.annotation_nelems end as out_nelems,
           case when k.collective_name is not null then k.dtype
                when d.collective_name is not null then d.dtype
                else d.annotation_dtype end as dtype,
           coalesce(k.group_size, d.group_size,
                    cast(json_array_length(coalesce(k.process_group_ranks, d.process_group_ranks)) as int),
                    w.world_size) as group_size,
           coalesce(k.process_group_name, d.process_group_name, 'unknown') as process_group
    from ck_kernels k
    left join ck_describer d on d.rank = k.rank and d.kernel_id = k.id
    left join ranks w on w.rank = k.rank
),
-- collective_type(text) of lib/collectives.sql, applied to each candidate name in turn (the first non-null wins)
ck_typed as (
    select *,
           coalesce(transform(array(k_collective_name, d_collective_name, d_name, kernel_name), t ->
               case
                   when t is null then null
                   when lower(t) rlike 'all_?reduce' then 'all_reduce'
                   when lower(t) rlike 'all_?gather' then 'all_gather'
                   when lower(t) rlike 'reduce_?scatter' then 'reduce_scatter'
                   when lower(t) rlike 'all_?to_?all' then 'all_to_all'
                   when lower(t) rlike 'broadcast' then 'broadcast'
                   when lower(t) rlike 'send_?recv' then 'send_recv'
                   when lower(t) rlike 'barrier' then 'barrier'
                   when lower(t) rlike '(^|[^a-z])(nccl(dev)?kernel_)?reduce([^a-z]|$)' then 'reduce'
                   when lower(t) rlike '(^|[^a-z])gather([^a-z]|$)' then 'gather'
                   when lower(t) rlike '(^|[^a-z])scatter([^a-z]|$)' then 'scatter'
                   when lower(t) rlike '(^|[^a-z])send([^a-z]|$)' then 'send'
                   when lower(t) rlike '(^|[^a-z])recv([^a-z]|$)' then 'recv'
               end)) as types
    from ck_described
),
kernels as (
    select rank, event_id, start_ns, end_ns, dur, group_size, process_group,
           coalesce(types[0], types[1], types[2], types[3]) as collective,
           -- collective_dtype_bytes(dtype)
           cast(greatest(in_nelems, out_nelems) * case lower(replace(dtype, 'c10::', ''))
               when 'double' then 8 when 'long' then 8 when 'long int' then 8 when 'int64' then 8
               when 'float64' then 8 when 'complexfloat' then 8 when 'complex<float>' then 8
               when 'unsigned long' then 8
               when 'float' then 4 when 'int' then 4 when 'float32' then 4 when 'int32' then 4
               when 'unsigned int' then 4
               when 'half' then 2 when 'bfloat16' then 2 when 'float16' then 2 when 'short' then 2
               when 'short int' then 2 when 'int16' then 2 when 'unsigned short' then 2
               when 'byte' then 1 when 'char' then 1 when 'bool' then 1 when 'uint8' then 1 when 'int8' then 1
               when 'signed char' then 1 when 'unsigned char' then 1
               when 'complexdouble' then 16 when 'complex<double>' then 16
               else case when lower(dtype) rlike 'float8' then 1 end
           end as bigint) as bytes,
           row_number() over (partition by rank, process_group order by start_ns, event_id) as seq
    from ck_typed
),
arrivals as (
    select *, max(start_ns) over (partition by process_group, seq) as last_start_ns
    from kernels
)
select process_group, seq, mode(collective) as collective, count(*) as ranks,
       (max(start_ns) - min(start_ns)) / 1e3 as start_skew_us,
       max_by(rank, struct(start_ns, -rank)) as slowest_rank,
       (max(start_ns) - min(start_ns)) / 1e3 as max_wait_us,
       max(group_size) as group_size,
       max_by(bytes, struct(start_ns, -rank)) as bytes,
       min(start_ns) as first_start_ns, max(start_ns) as last_start_ns,
       (max(end_ns) - min(end_ns)) / 1e3 as end_skew_us,
       max_by(dur, struct(start_ns, -rank)) / 1e3 as transfer_us,
       avg(last_start_ns - start_ns) / 1e3 as mean_wait_us
from arrivals
group by process_group, seq
order by process_group, seq
