"""A pod bigger than one machine: emulated hosts spread over several machines (docs/pods.md).

Each machine runs the same script with `xlasim run --machines M --machine-rank K --rendezvous
HOST:PORT`, holds an equal share of the slice's hosts (`settings.py`) and answers every identity
query as the pod does. The machines form one torch.distributed gloo group after machine 0 has
checked every machine's token (`join.py`); a collective whose ranks span machines meets on each
machine as before, then its machines exchange their ranks' calls and payloads as plain bytes
(`wire.py`, `link.py`), check that the calls match and combine in global rank order, each
machine for itself (`meeting.py`). `ranks.py` is the world's side: this machine's worker
processes, and failures passed between machines.
"""
