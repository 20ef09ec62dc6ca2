"""Ranks outside the pytest process: a test body packed for another process (`jobs`), run and
its failure rendered there (`rank`), and a session on one machine of a pod (`pods`)."""
