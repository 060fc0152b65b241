"""Tests of replay and what-if against measured steps and ground truth."""
