"""Inference traces recorded on a GPU for the speed benches (README.md), and the script that recorded them."""
