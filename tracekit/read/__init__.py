"""The read stage: trace files → Arrow tables, one file at a time, nothing linked yet.

A Kineto trace file (JSON, gzipped or not) is read as a stream of chunks of whole `traceEvents` entries; each chunk
is decoded and turned into rank-free tables, the file's timed entries are screened, and ranks are applied per file.
Reading a file needs no other file, so files can be read in worker processes. Every entry ends up as a row of some
table or as a diagnostic with `dropped = true` (the nothing-lost invariant). Bad input never crashes: it is an
InputError naming the file and the problem.

Modules, in the order a file goes through them:
- `text`: the file's text: gunzipped within bounds (`text_limit`), cut into chunks of whole entries, and for a
  file cut short (a killed job, a full disk, a cut gzip stream) where its text stops; `parse_file` splits a whole
  file into its top-level keys and its entries' text (`ParsedFile`).
- `jsontext`: JSON text msgspec will not decode as it stands: its structure (where a cut fell), and the repairs
  of not-quite-JSON (NaN, lone surrogates, bytes that are not UTF-8).
- `entries`: decoding entries into msgspec Structs (`args`, `ts`, `dur` kept as exact JSON text), repairing those
  that need it.
- `columns`: decoded entries → rank-free Arrow tables and the notes they give (`EntryTables`); `TraceParts` is one
  file read.
- `screen`: exact duplicates dropped, timestamps and durations that cannot be real nulled.
- `ranks`: the rank of a file, its tables with ranks applied (`FileTables`), the threads, processes and ranks
  tables from metadata entries and top-level keys.
- `chunk_workers`: the chunks of a large read (a large file, or the ranks of a run together) shared with helper
  processes on the spare CPUs (`ChunkHelpers`), which send each chunk's tables back as Arrow IPC.
- `kineto`: the reader's entry: `read_trace` (streamed, or whole when streaming meets anything unusual).
- `execution_trace`: Execution Traces (ExecutionTraceObserver JSON) → `et_nodes` / `et_tensors` of one rank.
- `dataset`: reading back an ingested Parquet dataset as `TraceTables`.
"""
