"""The engine under every stage: the one DuckDB connection factory, the immutable trace tables, the SQL catalog."""
