-- question: Which algorithm did each collective call run, what bus bandwidth did it reach, and how far is that from the GPU's link peak?
-- inputs: collectives, events, edges, ranks, device_peaks
-- includes: lib/collectives, lib/peaks
-- columns:
--   rank: rank
--   process_group: as in collectives
--   seq: as in collectives: the call's order within (rank, process_group)
--   collective: as in collectives (all_reduce, all_gather, ...)
--   algorithm: NCCL/RCCL algorithm from the kernel name (RING, TREE, NVLS, NVLS_TREE, COLLNET_DIRECT,
--     COLLNET_CHAIN, PAT); null when the name does not say (ncclDevKernel_Generic picks it at run time)
--   protocol: LL, LL128 or SIMPLE from the kernel name; null when the name does not say
--   dtype: as in collectives
--   bytes: bytes, message size as nccl-tests counts it (collectives)
--   group_size: ranks
--   duration_us: µs, kernel duration
--   algbw_gbps: GB/s, bytes / duration
--   bus_factor: nccl-tests' bus bandwidth factor for the collective and group size n: all_reduce 2(n-1)/n;
--     all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, reduce, send/recv 1
--   busbw_gbps: GB/s, algbw_gbps · bus_factor
--   device: the peaks table's device the rank's GPU matched (null: unknown, see peak_note)
--   link_peak_gbps: GB/s, the device's per-GPU link bandwidth in one direction (NVLink, Infinity Fabric), from the
--     peaks table; null where the table has none (PCIe-only parts)
--   percent_of_link_peak: %, 100 · busbw_gbps / link_peak_gbps
--   peak_note: why percent_of_link_peak is null (unknown device, no link peak for it)
-- notes: Bus bandwidth follows nccl-tests' PERFORMANCE.md: the bandwidth each GPU's links would carry to move the
--   message with the optimal algorithm, comparable to the hardware's link bandwidth whatever the group size. The
--   link peak is the GPU's own fabric (NVLink / Infinity Fabric): an upper bound for a group within one node; a
--   group that spans nodes is held to the network, which the peaks table does not know (its share is then an
--   overestimate of how far it is from the link's limit). Durations include the time a rank waited in the kernel
--   for its peers (collective_waits), so shares are lower bounds on the transfer's own rate.
with
link_peaks as (
    select device, max(link_gb_per_s) as link_peak_gbps from device_peaks group by device
),
named as (
    select *,
           regexp_extract(kernel_name, '_(RING|TREE|NVLS_TREE|NVLS|COLLNET_DIRECT|COLLNET_CHAIN|PAT)_(LL128|LL|SIMPLE)',
                          ['algorithm', 'protocol']) as parts
    from collectives
)
select c.rank, c.process_group, c.seq, c.collective,
       nullif(c.parts.algorithm, '') as algorithm, nullif(c.parts.protocol, '') as protocol,
       c.dtype, c.bytes, c.group_size, c.duration_us, c.algbw_gbps,
       bus_bandwidth_factor(c.collective, c.group_size) as bus_factor,
       c.busbw_gbps, d.device, l.link_peak_gbps,
       100 * c.busbw_gbps / l.link_peak_gbps as percent_of_link_peak,
       case
           when c.busbw_gbps is null then null
           when d.peak_note is not null then d.peak_note
           when l.link_peak_gbps is null then 'no link peak for ' || d.device || ' in the device peaks table'
       end as peak_note
from named c
left join rank_devices() d on d.rank = c.rank
left join link_peaks l on l.device = d.device
order by c.rank, c.process_group, c.seq
