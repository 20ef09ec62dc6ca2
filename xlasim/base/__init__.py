"""The base layer: what every other layer shares, and nothing that imports torch at module level.

The errors xlasim raises, the emulated slice's shape (`topology`: cores, processes, hosts; its
TPU `identity`), and which rank the calling thread is (`rank_context`). Everything here is
imported before the zygote starts (`xlasim.emulate`), so torch and torch_xla are imported only
inside functions.
"""
