"""The `trdb` command: the interactive shell, batch files, dot commands, output modes and pictures."""
