"""Tests whose body runs on every rank (`calls`): the fixtures that reach the ranks, fixtures
made on each rank, and pytest's debugger on ranks."""
