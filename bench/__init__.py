"""Benchmarks (not tests): each prints its figures and writes bench/results/*.json."""
