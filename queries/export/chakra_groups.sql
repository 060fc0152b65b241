-- question: Which NPUs (ranks) make up each communicator group the Chakra nodes name (ASTRA-sim's
--   --comm-group-configuration file)?
-- inputs: ranks, chakra_nodes
-- columns:
--   group_id: the id the nodes' pg_name carries (from 1)
--   process_group: the trace's process group name
--   npus: the group's ranks, ascending
--   members_from: pg_config (the trace's distributedInfo.pg_config lists the group's ranks; an empty list: every
--     rank of its pg_size, or of the world) or export (not in any pg_config: the ranks of this export whose
--     communication nodes name it; inferred)
-- notes: One row per group a communication node names; written as JSON {"group_id": [npus...]} beside the .et
--   files, the format ASTRA-sim's Workload::initialize_comm_groups reads (keys parsed as integers).
with
used as (
    select distinct pg_name::bigint as group_id, process_group from chakra_nodes where pg_name <> ''
),
configured as (
    select g.pg.pg_name as process_group,
           if(len(coalesce(g.pg.ranks, [])) > 0, g.pg.ranks,
              range(coalesce(g.pg.pg_size, g.world_size))) as npus
    from (select world_size,
                 unnest(try_cast(json(pg_config) as struct(pg_name varchar, pg_size bigint, ranks bigint[])[])) as pg
          from ranks where pg_config is not null) g
),
configured_groups as (
    select process_group, list_sort(list_distinct(flatten(list(npus)))) as npus from configured
    where process_group is not null group by process_group
),
used_by as (
    select process_group, list_sort(list(distinct rank::bigint)) as npus
    from chakra_nodes where process_group is not null group by process_group
)
select u.group_id, u.process_group, coalesce(c.npus, b.npus) as npus,
       if(c.npus is not null, 'pg_config', 'export') as members_from
from used u
left join configured_groups c on c.process_group = u.process_group
left join used_by b on b.process_group = u.process_group
order by u.group_id
