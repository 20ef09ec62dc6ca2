"""Collective timelines: a recorded event stream (`xlasim.events`) made into files people read.

- `timeline`: the stream joined into per-rank collectives (entered, last member arrived,
  returned) and the other spans;
- `chrome`: `trace.json` in the Chrome trace event format (Perfetto, chrome://tracing);
- `canonical`: `collectives.txt`, time-free, one line per collective per rank, and the first
  divergence between two of them (`xlasim trace diff`);
- `plot`: a PNG of ranks against time (matplotlib, the `trace` extra);
- `session`: when a launch records, and the files written at its end or failure;
- `cli`: the `xlasim trace` command. See docs/tracing.md.
"""
