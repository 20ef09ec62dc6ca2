"""Marks this folder as an accelerate-style checkout for `xlasim huggingface`; the scripts and
tests here import the installed accelerate, never this package."""
