"""Tests of the writers: workbooks, graph files, the timeline, Chakra ET, atomic and bounded outputs."""
