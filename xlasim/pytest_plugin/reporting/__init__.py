"""What a session reports: ranks' outcomes settled into one (`outcomes`), pytest's terminal
(`terminal`, `progress`), XLA counters (`metrics`, `session_counts`), ranks' coverage."""
