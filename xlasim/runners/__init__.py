"""The runners' kit: what torch_xla's, Lightning's and Hugging Face's runners share.

Each runner (`xlasim conformance`, `xlasim lightning`, `xlasim huggingface`; the folders
`conformance/`, `lightning/`, `huggingface/`) knows what its suite holds, how its CI launches
it and the findings it explains failures with. The kit runs their jobs: the slice and the
bounded child process (`execution`), the probe plugin loaded next to xlasim's
(`pytest_probe`, `probe_names`), the job loop and the rerun without a crashing test (`jobs`),
the rows and what junit and the output say (`rows`, `reasons`), findings (`findings`), the
table and the CI verdict (`table`), and the options every runner takes (`options`).
"""
