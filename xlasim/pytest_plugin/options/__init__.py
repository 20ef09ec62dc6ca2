"""What a session is asked to do: options, ini keys and variables (`command_line`, resolved in
`settings`), markers and their arguments, timeouts, world sizes, Hypothesis profiles, races."""
