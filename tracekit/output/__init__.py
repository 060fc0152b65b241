"""The output stage: workbooks, result files, terminal views, graphs, timeline, Chakra ET, datasets, all atomic."""
