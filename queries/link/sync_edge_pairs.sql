-- question: Which sync edges does the edges table keep: one per (op waited for, what waited)?
-- inputs: sync_edges
-- notes: Two sync events of one call would give the same edge twice; each still counts as resolved
--   (unresolved_syncs reads sync_edges).
select distinct on (rank, src, dst) * from sync_edges
