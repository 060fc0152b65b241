-- about: collectives: NCCL/RCCL and every other communication kernel (scalar and table macros shared by
--   collectives, collective_skew, collective_waits, replay and the Chakra export).
-- inputs: events, edges, ranks
-- includes: lib/names
-- macros:
--   collective_type(text): all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, send_recv,
--     send, recv, gather, scatter, barrier, or null; from a c10d collective name (allreduce, _allgather_base,
--     alltoall_base, ...), a `nccl:*` annotation or a kernel name (ncclDevKernel_AllGather_RING_LL, ...).
--   kernel_collective(name): the collective a communication kernel's name implies: DeepEP's and MORI's
--     dispatch/combine/notify kernels are all_to_all, custom all-reduce (cross_device_reduce_*, quickreduce)
--     all_reduce, all2all(v) all_to_all, else collective_type(name).
--   collective_dtype_bytes(t): bytes per element of a dtype as written by record_param_comms (Float, BFloat16,
--     Long, ...) or in `Input type` (float, c10::BFloat16, long int, ...); null when unknown.
--   bus_bandwidth_factor(type, n): nccl-tests' busbw / algbw for a group of n ranks: all_reduce 2(n-1)/n;
--     all_gather, reduce_scatter, all_to_all, gather, scatter (n-1)/n; broadcast, reduce, send, recv,
--     send_recv 1; null otherwise (barrier, unknown).
--   collective_kernels(): one row per communication kernel (communication_kernel in lib/categories.sql, the
--     communication category of gpu_timeline) with the collective's type, size and process group (see
--     collectives.sql for the columns and where each comes from).

create or replace macro collective_type(text) as
    case
        when text is null then null
        when regexp_matches(lower(text), 'all_?reduce') then 'all_reduce'
        when regexp_matches(lower(text), 'all_?gather') then 'all_gather'
        when regexp_matches(lower(text), 'reduce_?scatter') then 'reduce_scatter'
        when regexp_matches(lower(text), 'all_?to_?all') then 'all_to_all'
        when regexp_matches(lower(text), 'broadcast') then 'broadcast'
        when regexp_matches(lower(text), 'send_?recv') then 'send_recv'
        when regexp_matches(lower(text), 'barrier') then 'barrier'
        when regexp_matches(lower(text), '(^|[^a-z])(nccl(dev)?kernel_)?reduce([^a-z]|$)') then 'reduce'
        when regexp_matches(lower(text), '(^|[^a-z])gather([^a-z]|$)') then 'gather'
        when regexp_matches(lower(text), '(^|[^a-z])scatter([^a-z]|$)') then 'scatter'
        when regexp_matches(lower(text), '(^|[^a-z])send([^a-z]|$)') then 'send'
        when regexp_matches(lower(text), '(^|[^a-z])recv([^a-z]|$)') then 'recv'
    end;

create or replace macro kernel_collective(name) as
    case
        when regexp_matches(name, '(?i)cross_device_reduce|quickreduce') then 'all_reduce'
        when regexp_matches(name, '(deep_ep|dpsk::ep)::|(?i:ep(dispatch|combine)(intra|inter)node)')
             and regexp_matches(name, '(?i)dispatch|combine|notify') then 'all_to_all'
        when regexp_matches(name, '(?i)all2all') then 'all_to_all'
        else collective_type(name)
    end;

create or replace macro collective_dtype_bytes(t) as
    case lower(replace(t, 'c10::', ''))
        when 'double' then 8 when 'long' then 8 when 'long int' then 8 when 'int64' then 8 when 'float64' then 8
        when 'complexfloat' then 8 when 'complex<float>' then 8 when 'unsigned long' then 8
        when 'float' then 4 when 'int' then 4 when 'float32' then 4 when 'int32' then 4 when 'unsigned int' then 4
        when 'half' then 2 when 'bfloat16' then 2 when 'float16' then 2 when 'short' then 2 when 'short int' then 2
        when 'int16' then 2 when 'unsigned short' then 2
        when 'byte' then 1 when 'char' then 1 when 'bool' then 1 when 'uint8' then 1 when 'int8' then 1
        when 'signed char' then 1 when 'unsigned char' then 1
        when 'complexdouble' then 16 when 'complex<double>' then 16
        else case when regexp_matches(lower(t), 'float8') then 1 end
    end;

create or replace macro bus_bandwidth_factor(type, n) as
    case
        when type = 'all_reduce' then 2.0 * (n - 1) / n
        when type in ('all_gather', 'reduce_scatter', 'all_to_all', 'gather', 'scatter') then 1.0 * (n - 1) / n
        when type in ('broadcast', 'reduce', 'send', 'recv', 'send_recv') then 1.0
    end;

create or replace macro collective_kernels() as table
    with recursive
    ck_kernels as materialized (
        select k.rank, k.id, k.name, k.ts, k.dur, k.stream, k.collective_name, k.in_msg_nelems, k.out_msg_nelems,
               k.dtype, k.group_size, k.process_group_name, k.process_group_desc, k.process_group_ranks,
               l.src as call_id
        from events k
        semi join (from gpu_op_categories() where kind = 'kernel' and timeline_category = 'communication') c
            on c.name = k.name
        left join edges l on l.kind = 'launch' and l.rank = k.rank and l.dst = k.id
        where k.kind = 'kernel'
    ),
    -- each event's parent, and whether the parent says what a collective is, looked up once: the recursion below
    -- joins this each iteration instead of scanning edges and events (once per tree level: 0.14 s of 0.26 on a
    -- 53 MB trace with Python frames, for 48 kernels)
    ck_parents as materialized (
        select n.rank, n.dst as id, n.src as parent,
               p.collective_name is not null or regexp_matches(p.name, '^(nccl|rccl|gloo):') as parent_found
        from edges n
        join events p on p.rank = n.rank and p.id = n.src
        -- none where no kernel communicates: a trace without collectives skips this join (0.03 s, SD3.5 inference)
        where n.kind = 'nest' and exists (from ck_kernels where call_id is not null)
    ),
    -- the launch call's enclosing events, nearest first, up to the first that says what the collective is: a
    -- record_param_comms (or c10d op) with collective args, or a `nccl:*` annotation (older traces)
    ck_up(rank, kernel_id, node, depth, found) as (
        select rank, id, call_id, 0, false from ck_kernels where call_id is not null
        union all
        select u.rank, u.kernel_id, n.parent, u.depth + 1, n.parent_found
        from ck_up u
        join ck_parents n on n.rank = u.rank and n.id = u.node
        where not u.found
    ),
    ck_describer as (
        select u.rank, u.kernel_id, p.name, p.collective_name, p.in_msg_nelems, p.out_msg_nelems, p.dtype,
               p.group_size, p.process_group_name, p.process_group_desc, p.process_group_ranks,
               -- annotation: the first input's shape and type
               coalesce(list_product(json_extract(p.input_dims, '$[0]')::bigint[]), 1)::bigint as annotation_nelems,
               json_extract_string(p.input_type, '$[0]') as annotation_dtype
        from ck_up u join events p on p.rank = u.rank and p.id = u.node
        where u.found
    ),
    ck_world as (
        select rank, world_size from ranks
    ),
    ck_described as (
        select k.rank, k.id as event_id, k.name as kernel_name, k.ts as start_ns, k.ts + k.dur as end_ns, k.dur,
               k.stream,
               case when k.collective_name is not null then 'kernel'
                    when d.collective_name is not null then 'op'
                    when d.kernel_id is not null then 'annotation'
                    else 'kernel_name' end as args_source,
               coalesce(collective_type(k.collective_name), collective_type(d.collective_name),
                        collective_type(d.name), kernel_collective(k.name)) as collective,
               coalesce(k.collective_name, d.collective_name, d.name) as collective_name,
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
                        json_array_length(coalesce(k.process_group_ranks, d.process_group_ranks))::int,
                        w.world_size) as group_size,
               coalesce(k.process_group_name, d.process_group_name, 'unknown') as process_group,
               coalesce(k.process_group_desc, d.process_group_desc) as process_group_desc
        from ck_kernels k
        left join ck_describer d on d.rank = k.rank and d.kernel_id = k.id
        left join ck_world w on w.rank = k.rank
    )
    select *,
           row_number() over (partition by rank, process_group order by start_ns, event_id) as seq,
           collective_dtype_bytes(dtype) as elem_bytes,
           (greatest(in_nelems, out_nelems) * collective_dtype_bytes(dtype))::bigint as bytes,
           bus_bandwidth_factor(collective, group_size) as busbw_factor
    from ck_described;
