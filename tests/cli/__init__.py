"""Tests of the commands: options, one-line errors and exit codes, progress."""
